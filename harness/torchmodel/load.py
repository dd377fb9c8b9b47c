"""A user's PyTorch factory: imported, called at one (T, d), its inputs drawn, its forward run.

``harness depth --torch pkg.mod:factory --shape X=1,T,d --T 64 1024 --d 32``:

* the factory (``pkg.mod:factory`` or ``path/file.py:factory``) returns an ``nn.Module`` or a
  function of tensors. It is called with the keyword arguments it accepts among ``T`` and
  ``d`` (both when it takes ``**kwargs``, none when it takes neither), under
  ``torch.manual_seed(seed)`` so that its parameters are the same draw on every call;
* each ``--shape NAME=DIMS`` is one input, a standard normal draw from ``seed``; a dimension is
  an integer, T, d or k*T / k*d (``depth.parse_shape``). A batch is an integer (``X=1,T,d``):
  a letter B is refused, since the counts would depend on a size the command does not take.
  The first ``--shape`` is the sequence: its dimension -2 is T, its row 0 input position 1;
* the inputs are passed by keyword when the forward takes every ``--shape`` name as a
  parameter (or has ``**kwargs``); when it takes none of them by name (``nn.LSTM.forward(input,
  hx)``, ``nn.TransformerEncoderLayer.forward(src, ...)``, a forward of ``*args``) they are
  passed by position in ``--shape`` order. A mix is refused, naming the stray input.

Every error in the user's code (a syntax error, a failing import, an exception in the factory
or the forward) is reported as theirs, one line naming their file and line
(``harness.analysis.depth.user_error``), never as a traceback through the harness or PyTorch.
"""

from __future__ import annotations

import dataclasses
import inspect
import os

from harness.infra.files import UsageError

INSTALL = "pip install 'harness[torch]' (PyTorch 2.13, CPU is enough)"
DTYPES = ("float32", "float64")
FACTORY_ARGS = ("T", "d")        # what a factory may take, by keyword


def import_torch(arg="--torch"):
    """The ``torch`` module, or a one-line UsageError saying how to install it."""
    try:
        import torch
    except ImportError as e:
        raise UsageError(f"{arg}: needs PyTorch, which does not import here ({e}); install it "
                         f"with {INSTALL}") from None
    return torch


def _torch_dirs():
    """PyTorch's folders: its frames are never where a user's mistake is."""
    import torch
    return (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,)


def _theirs_or(e, spec, doing, arg):
    """``e`` as the user's UserCodeError when their code raised it, else None."""
    from harness.analysis import depth
    return depth.user_error(e, spec, doing, arg=arg, skip=_torch_dirs())


def backward_error(e, built):
    """``e``, raised while back-propagating through ``built``'s module, as the user's
    UserCodeError when their code raised it (a custom autograd Function of theirs), else None."""
    return _theirs_or(e, built.spec, f"back-propagating through {built.spec}", built.arg)


def load_factory(spec, arg="--torch"):
    """The factory that ``spec`` names, ``package.module:factory`` or ``path/file.py:factory``
    (a callable is returned as it is). A bad spec is a UsageError; an error raised while
    importing the user's module is theirs (UserCodeError naming their file and line)."""
    from harness.analysis import depth
    import_torch(arg)
    if callable(spec):
        return spec
    try:
        return depth.load_forward(spec, arg=arg)
    except BaseException as e:
        module = str(spec).rpartition(":")[0]
        theirs = _theirs_or(e, spec, f"importing {module}", arg)
        if theirs is not None:
            raise theirs from e
        if isinstance(e, ValueError):
            raise UsageError(str(e).replace("has no function", "has no factory")) from None
        raise


@dataclasses.dataclass
class Built:
    """A user's module at one (T, d), ready to call or export.

    ``module``: the nn.Module (in eval mode, in ``dtype``) or the function the factory gave.
    ``inputs``: name -> tensor, in ``--shape`` order, standard normal draws from the seed.
    ``sequence``: the name of the sequence input (the first ``--shape``), whose dim -2 is T.
    ``by_position``: the inputs go positionally, in ``inputs``' order (module(*inputs));
    else by keyword (module(**inputs)).
    """
    module: object
    inputs: dict
    sequence: str
    by_position: bool = False
    T: int = 0
    d: int = 0
    spec: str = ""
    arg: str = "--torch"

    @property
    def name(self):
        """What the tables call the model: the spec as the user wrote it."""
        return self.spec


def parse_shapes(texts, arg="--shape"):
    """``["X=1,T,d", "W=d,d"]`` -> {"X": ("1", "T", "d"), ...}, in order, each checked: a
    UsageError naming the argument for a bad one, a repeated name, a letter B, or a first input
    (the sequence) whose dimension -2 is not T."""
    from harness.analysis import depth
    if not texts:
        raise UsageError(f"{arg}: --torch needs one --shape per input of the module, the "
                         f"sequence first (e.g. --shape X=1,T,d)")
    shapes = {}
    for text in texts:
        dims = str(text).partition("=")[2].split(",")
        if any(tok.strip() == "B" for tok in dims):
            raise UsageError(f"{arg}: a batch is an integer here (e.g. X=1,T,d), got {text!r}: "
                             f"the counts scale with it, so give the batch you mean")
        try:
            name, dims = depth.parse_shape(text, arg)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if name in shapes:
            raise UsageError(f"{arg}: each input once, got {name} twice")
        shapes[name] = dims
    first, dims = next(iter(shapes.items()))
    if len(dims) < 2 or dims[-2] != "T":
        raise UsageError(f"{arg}: the first input ({first}) is the sequence; its second-to-last "
                         f"dimension must be T, got {first}={','.join(dims)}")
    return shapes


def _factory_kwargs(factory, T, d, spec, arg):
    """The keyword arguments among T and d that ``factory`` takes; a UsageError when it needs
    another argument it cannot be given."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return {}
    P = inspect.Parameter
    if any(p.kind == P.VAR_KEYWORD for p in params.values()):
        return {"T": T, "d": d}
    given = {}
    for p in params.values():
        if p.name in FACTORY_ARGS and p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY):
            given[p.name] = {"T": T, "d": d}[p.name]
        elif p.default is P.empty and p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD):
            raise UsageError(f"{arg}: the factory {spec} needs its argument {p.name!r}, but a "
                             f"factory is called with T and d only (as it takes them); give "
                             f"{p.name} a default")
    return given


def _forward_of(module):
    import torch
    return module.forward if isinstance(module, torch.nn.Module) else module


def _by_position(module, names, spec, arg):
    """Whether the inputs ``names`` go by position (True) or by keyword (False) to ``module``;
    a UsageError when the forward takes some of them by name and not the others, or cannot
    take them at all."""
    try:
        params = inspect.signature(_forward_of(module)).parameters
    except (TypeError, ValueError):
        return False
    P = inspect.Parameter
    var_kw = any(p.kind == P.VAR_KEYWORD for p in params.values())
    var_pos = any(p.kind == P.VAR_POSITIONAL for p in params.values())
    named = [n for n in names if n in params and params[n].kind in (P.POSITIONAL_OR_KEYWORD,
                                                                     P.KEYWORD_ONLY)]
    positional = [p for p in params.values()
                  if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    takes = ", ".join(p.name for p in params.values()) or "nothing"
    if len(named) == len(names) or (var_kw and not named and not positional and not var_pos):
        missing = [p.name for p in params.values() if p.default is P.empty and p.name not in names
                   and p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY, P.POSITIONAL_ONLY)]
        if missing:
            raise UsageError(f"{arg}: the forward of {spec} needs its input {missing[0]!r} too "
                             f"(it takes {takes}); give each one a --shape")
        return False
    if named:
        stray = next(n for n in names if n not in named)
        raise UsageError(f"{arg}: the forward of {spec} takes {', '.join(named)} by name but "
                         f"no input named {stray!r} (it takes {takes}); name every --shape "
                         f"after its parameter, or none (then they go by position)")
    if not var_pos and len(names) > len(positional):
        raise UsageError(f"{arg}: the forward of {spec} takes {len(positional)} input(s) by "
                         f"position ({takes}) but {len(names)} --shape were given")
    need = [p.name for p in positional[len(names):] if p.default is P.empty]
    if need:
        raise UsageError(f"{arg}: the forward of {spec} needs its input {need[0]!r} too (it "
                         f"takes {takes}); give one --shape per input, in its order")
    return True


def build(factory, spec, shapes, T, d, *, seed=0, dtype="float32", arg="--torch"):
    """The factory's module at (T, d) with its inputs: a ``Built``.

    ``factory``: a callable or a spec (``load_factory``); ``spec``: the name the tables use;
    ``shapes``: {name: dims} (``parse_shapes``; a list of ``NAME=DIMS`` texts is parsed);
    ``seed``: the factory runs under ``torch.manual_seed(seed)`` and the inputs are normal
    draws from a generator seeded with it; ``dtype``: "float32" (default) or "float64".
    A factory or forward signature that does not fit is a UsageError; an exception the
    factory raises is the user's (UserCodeError)."""
    from harness.analysis import depth
    from harness.infra.validate import check_int
    torch = import_torch(arg)
    if dtype not in DTYPES:
        raise UsageError(f"{arg}: dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    try:
        T, d = check_int("T", T), check_int("d", d)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not isinstance(shapes, dict):
        shapes = parse_shapes(shapes)
    if not shapes:
        parse_shapes(())
    f = load_factory(factory if callable(factory) else spec if factory is None else factory, arg)
    spec = spec or getattr(f, "__name__", "factory")
    kwargs = _factory_kwargs(f, T, d, spec, arg)
    tdtype = getattr(torch, dtype)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            module = f(**kwargs)
            if isinstance(module, torch.nn.Module):
                module = module.to(tdtype).eval()
    except BaseException as e:
        theirs = _theirs_or(e, spec, f"calling the factory {spec}", arg)
        if theirs is not None:
            raise theirs from e
        raise
    if not (isinstance(module, torch.nn.Module) or callable(module)):
        raise UsageError(f"{arg}: the factory {spec} must return an nn.Module or a function of "
                         f"tensors, got {type(module).__name__}")
    gen = torch.Generator().manual_seed(seed)
    inputs = {}
    for name, dims in shapes.items():
        size = tuple(depth._size(tok, T, d) for tok in dims)
        inputs[name] = torch.randn(size, generator=gen, dtype=tdtype)
    by_pos = _by_position(module, list(shapes), spec, arg)
    return Built(module, inputs, next(iter(shapes)), by_pos, T, d, spec, arg)


def call(built, **overrides):
    """Run ``built.module`` on its inputs (``overrides``: name -> tensor replacing one), by
    keyword or by position as ``built.by_position`` says; the user's exception is theirs
    (UserCodeError). Returns the output tensor, the first of a tuple (nn.LSTM's output)."""
    torch = import_torch(built.arg)
    unknown = [k for k in overrides if k not in built.inputs]
    if unknown:
        raise ValueError(f"call: no input named {unknown[0]!r} (the inputs: "
                         f"{', '.join(built.inputs)})")
    inputs = {**built.inputs, **overrides}
    try:
        out = built.module(*inputs.values()) if built.by_position else built.module(**inputs)
    except BaseException as e:
        theirs = _theirs_or(e, built.spec, f"running the forward of {built.spec}", built.arg)
        if theirs is not None:
            raise theirs from e
        raise
    return first_tensor(out, built.spec, built.arg, torch)


def first_tensor(out, spec, arg, torch=None):
    """The output tensor of a forward's result: itself, or the first tensor of a tuple/list."""
    torch = torch or import_torch(arg)
    while isinstance(out, (tuple, list)) and out:
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise UsageError(f"{arg}: the forward of {spec} must return a tensor or a tuple whose "
                         f"first item is one, got {type(out).__name__}")
    return out
