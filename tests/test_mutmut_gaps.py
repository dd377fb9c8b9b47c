"""Tests written from mutmut's survivors in code changed since the 9709ba6 mutation run
(docs/mutation-score.json): each names the mutant it kills, and checks the behaviour that
mutant changes, on the public function, worked out by hand."""

from __future__ import annotations

import os
import re
import runpy

import numpy as np
import pytest

from harness.analysis import depth
from harness.infra.files import UsageError, UserCodeError, check_name


def _raised_by_their_code(tmp_path, source):
    """The exception that ``f`` of a user's file (``source``) raises, and the file's path."""
    path = tmp_path / "theirs_gap.py"
    path.write_text(source)
    f = runpy.run_path(str(path))["f"]
    try:
        f()
    except Exception as e:           # noqa: BLE001 - whatever their code raised
        return e, path
    raise AssertionError("their f() did not raise")


def test_an_exception_without_a_message_is_named_by_its_class_alone(tmp_path):
    """``raise RuntimeError`` (no message) reads as "RuntimeError", not as an IndexError of
    the harness (x_user_error__mutmut_73: the message's first line read whatever it is)."""
    e, path = _raised_by_their_code(tmp_path, "def f():\n    raise RuntimeError\n")
    err = depth.user_error(e, "theirs_gap.py:f", "tracing theirs_gap.py:f")
    assert isinstance(err, UserCodeError)
    assert str(err) == (f"--forward: {path}:2: RuntimeError (raised while tracing "
                        f"theirs_gap.py:f; your code's frames below)")
    e, path = _raised_by_their_code(tmp_path, "def f():\n    raise ValueError('  \\n')\n")
    assert str(depth.user_error(e, "s", "tracing s")).startswith(f"--forward: {path}:2: ValueError (")


def test_an_exception_of_theirs_raised_from_another_is_the_one_named(tmp_path):
    """Their ``raise RuntimeError(...) from e`` names the RuntimeError and its line (5), not
    the KeyError it came from (line 3): the cause is taken only when none of the exception's
    own frames is theirs, as when trace_forward re-raised it (x_user_error__mutmut_4)."""
    source = ("def f():\n"
              "    try:\n"
              "        {}['k']\n"
              "    except KeyError as e:\n"
              "        raise RuntimeError('outer') from e\n")
    e, path = _raised_by_their_code(tmp_path, source)
    assert isinstance(e.__cause__, KeyError)
    err = depth.user_error(e, "theirs_gap.py:f", "tracing theirs_gap.py:f")
    assert str(err) == (f"--forward: {path}:5: RuntimeError: outer (raised while tracing "
                        f"theirs_gap.py:f; your code's frames below)")
    assert f'File "{path}", line 5, in f' in err.frames
    assert "line 3" not in err.frames


def test_check_name_refuses_del_and_the_c1_controls_and_nothing_around_them():
    """U+007F (DEL) to U+009F are refused as the C0 controls are; '~' (U+007E) and U+00A0
    pass (x_check_name__mutmut_20: DEL itself let through)."""
    for c in ("\x7f", "\x80", "\x9f"):
        with pytest.raises(UsageError, match=re.escape(f"holds the control character {c!r}; ")):
            check_name(f"a{c}b", "--out")
    assert check_name("a~b\xa0c") == "a~b\xa0c"


def _axes_with(*ys, x=(10.0, 100.0, 1000.0)):
    import matplotlib.pyplot as plt

    from harness.report import figures  # noqa: F401 - its backend, before pyplot draws
    fig, ax = plt.subplots()
    for i, y in enumerate(ys):
        ax.plot(x, y, marker="o", label=f"line{i}")
    return fig, ax


def test_lines_with_a_gap_at_the_same_point_coincide():
    """Two lines that agree everywhere they are drawn, a missing (NaN) point at the same T
    included, hide one another: one group (x_coincident__mutmut_40: NaN never equal)."""
    import matplotlib.pyplot as plt

    from harness.report import figures
    nan = float("nan")
    fig, ax = _axes_with([1.0, nan, 3.0], [1.0, nan, 3.0], [1.0, 2.0, 3.0])
    a, b, c = ax.get_lines()
    assert figures.coincident(ax) == [[a, b]]
    plt.close(fig)


def test_the_note_of_coinciding_lines_sits_in_the_panels_lower_right_corner():
    """The note is placed at (0.99, 0.01) of the panel whatever its data range, not at the
    data point (0.99, 0.01), here outside the axes (x_reveal__mutmut_26)."""
    import matplotlib.pyplot as plt

    from harness.report import figures
    fig, ax = _axes_with([10.0, 20.0, 30.0], [10.0, 20.0, 30.0])
    assert figures.reveal(fig) == [["line0", "line1"]]
    (note,) = [t for t in ax.texts if t.get_text().startswith("lines that coincide")]
    fig.canvas.draw()
    at = note.get_transform().transform(note.get_position())
    assert np.allclose(at, ax.transAxes.transform((0.99, 0.01)))
    box = ax.get_window_extent()
    assert box.x0 < at[0] < box.x1 and box.y0 < at[1] < box.y1
    # right-aligned on that corner, so that the whole note lies inside the panel
    # (x_reveal__mutmut_35: left-aligned, it ran past the right edge)
    ext = note.get_window_extent()
    assert box.x0 <= ext.x0 and ext.x1 <= box.x1 + 1e-6 and np.isclose(ext.x1, at[0])
    plt.close(fig)


def test_an_output_sets_discard_never_raises_when_its_stage_is_gone(tmp_path):
    """``discard`` runs in a ``finally``: a staging folder already gone (removed by hand, or
    by another run's clean-up) is no error that would hide the one being raised
    (xǁOutputSetǁdiscard__mutmut_3: rmtree's errors no longer ignored)."""
    import shutil

    from harness.infra.files import OutputSet
    files = OutputSet(tmp_path)
    files.write_text("a.txt", "a")
    shutil.rmtree(files.stage)
    files.discard()
    assert list(tmp_path.iterdir()) == []


def _legend_label(handles, line):
    """``figures._label`` of ``line`` in a figure whose legend shows ``handles``, labelled
    h0, h1, ..."""
    import matplotlib.pyplot as plt

    from harness.report import figures
    fig, ax = plt.subplots()
    ax.add_line(line)
    fig.legend(handles, [f"h{i}" for i in range(len(handles))])
    try:
        return figures._label(fig, line)
    finally:
        plt.close(fig)


def test_a_lines_legend_entry_is_the_one_in_its_colour_and_marker():
    """Two entries share a colour: the one with the line's marker names it
    (x_label__mutmut_29: markers ignored); an entry drawn without a marker names a line of its
    colour whatever the line's marker (x_label__mutmut_32, _33: 'None' misspelt); an entry with
    no colour of its own, a patch, is passed over (x_label__mutmut_9: get_color called on it)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    def line(marker, **kw):
        return Line2D([0, 1], [0, 1], color="C0", marker=marker, label="own", **kw)
    assert _legend_label([line("o"), line("s")], line("s")) == "h1"
    assert _legend_label([line("o"), line("s")], line("^")) == "own"
    assert _legend_label([line("None")], line("o")) == "h0"
    assert _legend_label([Patch(color="C0"), line("o")], line("o")) == "h1"


def test_the_table_of_contents_is_the_sections_items_and_nothing_between_them():
    """The contents list is exactly one <li> per section and the machine's, nothing between
    them (x_render_html__mutmut_21: text joined the items)."""
    from harness.report import html
    secs = [html.Section("a", "A", {}, "x"), html.Section("b", "B", {}, "y")]
    page = html.render_html(secs, {}, "cmd")
    assert ('<nav class="toc"><strong>Contents</strong><ol><li><a href="#a">A</a></li>'
            '<li><a href="#b">B</a></li><li><a href="#machine">Machine, versions and '
            'command</a></li></ol></nav>') in page


def test_the_line_named_is_theirs_not_numpys_below_it(tmp_path):
    """An error raised inside NumPy from their line names their line (3), the innermost
    frame outside the standard library, NumPy and SciPy (x_user_error__mutmut_60: the
    innermost NumPy frame)."""
    source = ("import numpy as np\n\n"
              "def f():\n    return np.linalg.inv(np.zeros((2, 2)))\n")
    e, path = _raised_by_their_code(tmp_path, source)
    assert str(depth.user_error(e, "s", "tracing s")) == (
        f"--forward: {path}:4: LinAlgError: Singular matrix (raised while tracing s; your "
        f"code's frames below)")


def test_a_syntax_error_in_their_file_shows_its_line_and_caret(tmp_path):
    """A SyntaxError of their file: its file and line in the message, and below it the
    offending line with its caret, the message line left out (x_user_error__mutmut_52: the
    caret dropped too)."""
    path = tmp_path / "bad_gap.py"
    path.write_text("def f(X)\n    return X\n")
    with pytest.raises(SyntaxError) as info:
        runpy.run_path(str(path))
    err = depth.user_error(info.value, "s", f"importing {path}")
    assert str(err).startswith(f"--forward: {path}:1: SyntaxError: expected ':' (raised while ")
    tail = err.frames.rstrip("\n").splitlines()[-3:]
    assert tail[0] == f'  File "{path}", line 1' and tail[1].strip() == "def f(X)"
    assert set(tail[2].strip()) == {"^"}


def test_the_claims_groups_follow_one_another_with_nothing_between_them():
    """Each group's heading follows the previous group's table on the next line
    (x_claims_table_html__mutmut_54: text joined the groups)."""
    import pandas as pd

    from harness.report import html
    t = pd.DataFrame({"claim": ["s1", "a1"], "verdict": ["holds", "holds"],
                      "lesson": ["self-attention", "additive attention"]})
    page = html.claims_table_html(t)
    assert page.count("\n<h3 ") == 1 and page.startswith("<h3 ")
    assert "</table>\n<h3 " in page


# ------------------------------------------- survivors of the changed-functions run (13aaf66)

def test_a_space_is_a_printable_name_and_the_unit_separator_is_not():
    """A space is no control character (x_check_name__mutmut_17 refused it); U+001F, the last
    one below it, is."""
    assert check_name("my report") == "my report"
    with pytest.raises(UsageError, match="--out: the name 'a\\\\x1fb' holds the control "
                                         "character '\\\\x1f'"):
        check_name("a\x1fb")


def test_a_user_code_error_has_no_frames_unless_given():
    assert UserCodeError("m").frames == "" and UserCodeError("m", "f").frames == "f"


def test_an_input_of_two_to_the_62_elements_is_the_largest_traced():
    """2**62 elements pass, one more is refused, whatever memory is said to be free
    (x_check_forward_memory__mutmut_26/28/29 moved the bound); the message gives the free
    memory in GiB (_45/_46 divided by 3**30 and 2**31)."""
    free = 10 ** 30
    depth.check_forward_memory({"X": ("4611686018427387904",)}, 1, 1, available=free)
    with pytest.raises(MemoryError, match="X=4611686018427387905 at T = 1, d = 1 is "
                                          "4,611,686,018,427,387,905 elements"):
        depth.check_forward_memory({"X": ("4611686018427387905",)}, 1, 1, available=free)
    with pytest.raises(MemoryError, match=r"but only 3\.00 GiB are available"):
        depth.check_forward_memory({"X": ("T", "d")}, 2**20, 2**10, available=3 * 2**30)


def test_the_roofline_section_takes_the_reports_own_roofline_config():
    """A report config without a ``roofline`` gets roofline.QUICK, one with it its own
    (x_roofline_config__mutmut_1/2/7/8); the section passes it on (tests/test_report_build.py,
    whose stubbed config carries one: x__sections__mutmut_246)."""
    import dataclasses
    import types

    from harness.analysis import roofline
    from harness.infra import config
    from harness.report import build
    own = dataclasses.replace(roofline.QUICK, rounds=4)
    assert build.roofline_config(config.QUICK_REPORT) is roofline.QUICK
    assert build.roofline_config(types.SimpleNamespace(roofline=own)) is own


def _axes(*lines, n_axes=1):
    """A figure with ``lines`` [(x, y, kw), ...] drawn on its first axes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axs = plt.subplots(1, n_axes, squeeze=False)
    drawn = [axs[0, 0].plot(x, y, **kw)[0] for x, y, kw in lines]
    return fig, list(axs[0]), drawn


def test_coincident_lines_at_the_edges_of_its_rules():
    """Two points or more (_2, _3), the same x to 1e-9 (_29, _30), y within 2 % with no
    absolute slack (_39, _41), every group found after a line already grouped (_7), and a line
    grouped once (_44)."""
    import matplotlib.pyplot as plt
    from harness.report import figures
    try:
        fig, (ax,), _ = _axes(([1], [1], {}), ([1], [1], {}))
        assert figures.coincident(ax) == []                     # single points: not lines
        fig, (ax,), (a, b) = _axes(([1, 2], [3, 4], {}), ([1, 2], [3, 4], {}))
        assert figures.coincident(ax) == [[a, b]]
        fig, (ax,), _ = _axes(([1, 2], [3, 4], {}), ([1, 2 * (1 + 1e-7)], [3, 4], {}))
        assert figures.coincident(ax) == []                     # x apart by 1e-7
        fig, (ax,), _ = _axes(([1, 2], [3, 4], {}), ([1.5, 2.5], [3, 4], {}))
        assert figures.coincident(ax) == []
        fig, (ax,), _ = _axes(([1, 2], [1e-10, 2e-10], {}), ([1, 2], [5e-10, 9e-10], {}))
        assert figures.coincident(ax) == []                     # tiny, but 5 times apart
        fig, (ax,), (a, b, c, e) = _axes(([1, 2], [3, 4], {}), ([1, 2], [3, 4.01], {}),
                                         ([1, 2], [7, 8], {}), ([1, 2], [7, 8], {}))
        assert figures.coincident(ax) == [[a, b], [c, e]]
        fig, (ax,), (a, b, c) = _axes(*[([1, 2], [3, 4], {})] * 3)
        assert figures.coincident(ax) == [[a, b, c]]
    finally:
        plt.close("all")


def test_a_lines_label_is_read_from_any_axes_legend_and_a_markerless_entry():
    """An axes without a legend does not end the search (x__label__mutmut_2); a legend entry
    drawn with marker "" names a line of its colour whatever its marker (_34)."""
    import matplotlib.pyplot as plt
    from harness.report import figures
    try:
        fig, (ax0, ax1), (line,) = _axes(([1, 2], [3, 4], {"color": "C1", "marker": "o",
                                                           "label": "own"}), n_axes=2)
        entry, = ax1.plot([0], [0], color="C1", marker="", label="from the legend")
        ax1.legend(handles=[entry])
        assert figures._label(fig, line) == "from the legend"
    finally:
        plt.close("all")


def test_the_coincidence_note_is_small_and_grey():
    """x_reveal__mutmut_29/30: the note's size and colour."""
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt
    from harness.report import figures
    try:
        fig, (ax,), _ = _axes(([1, 2], [3, 4], {"label": "a"}), ([1, 2], [3, 4], {"label": "b"}))
        assert figures.reveal(fig) == [["a", "b"]]
        note, = ax.texts
        assert note.get_fontsize() == 7 and mcolors.same_color(note.get_color(), "0.3")
    finally:
        plt.close("all")


@pytest.mark.parametrize("apart", [{"ls": "--"}, {"mfc": "none"}])
def test_lines_drawn_apart_by_dashes_or_fill_alone_are_not_hidden(apart):
    """Two coincident lines of one marker size, told apart by their dashes alone or their fill
    alone, and named in the note, are not hidden (x_hidden__mutmut_15/16 dropped the fill and
    the dashes from the style)."""
    import matplotlib.pyplot as plt
    from harness.report import figures
    try:
        fig, (ax,), _ = _axes(([1, 2], [3, 4], {"label": "a", "marker": "o", "color": "k"}),
                              ([1, 2], [3, 4], {"label": "b", "marker": "o", "color": "k",
                                                **apart}))     # one colour: the style alone
        ax.text(0, 0, "lines that coincide (within 2%):\na = b")
        assert figures.hidden(fig) == []
        ax.texts[0].remove()
        assert figures.hidden(fig) == [["a", "b"]]                 # not named: hidden
    finally:
        plt.close("all")


def test_an_exception_never_raised_is_not_theirs():
    """No traceback, no cause: no frame of theirs, so None (x_user_error__mutmut_5 took the
    absent cause as what they raised, _32 went on without a frame)."""
    assert depth.user_error(ValueError("x"), "s", "tracing s") is None


def test_a_cause_of_theirs_behind_an_exception_without_frames_is_named(tmp_path):
    """An exception with no frames of its own whose cause their code raised: the cause is
    named (x_user_error__mutmut_13 dropped it)."""
    e, path = _raised_by_their_code(tmp_path, "def f():\n    raise KeyError('k')\n")
    outer = RuntimeError("wrapped")
    outer.__cause__ = e
    assert str(depth.user_error(outer, "s", "tracing s")).startswith(
        f"--forward: {path}:2: KeyError: 'k' (raised while tracing s")


def test_frames_in_a_skipped_folder_are_not_theirs(tmp_path):
    """A library the harness drives (``skip``, PyTorch's folder under --torch): an exception
    raised only in its frames, from a harness-like caller, is not theirs; the same from a file
    outside it is (x_user_error__mutmut_11/20/28 dropped ``skip``)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    e, path = _raised_by_their_code(lib, "def f():\n    raise KeyError('k')\n")
    this_file = __file__
    skip = (str(lib) + "/", os.path.dirname(os.path.abspath(this_file)) + "/")
    assert depth.user_error(e, "s", "tracing s", skip=skip) is None
    assert depth.user_error(e, "s", "tracing s", skip=skip[1:]) is not None
    outer = RuntimeError("wrapped")                    # its cause behind it, in the library
    outer.__cause__ = e
    assert depth.user_error(outer, "s", "tracing s", skip=skip) is None
    bad = lib / "bad_gap.py"
    bad.write_text("def f(X)\n")
    with pytest.raises(SyntaxError) as info:
        runpy.run_path(str(bad))
    assert depth.user_error(info.value, "s", "importing", skip=skip) is None
    assert depth.user_error(info.value, "s", "importing", skip=skip[1:]) is not None


def test_a_syntax_error_imported_by_their_file_shows_both(tmp_path):
    """Their file importing their other file that does not parse: the importing frame and the
    offending line, both (x_user_error__mutmut_44 kept only the second)."""
    (tmp_path / "broken_gap.py").write_text("def g(X)\n")
    path = tmp_path / "imports_gap.py"
    path.write_text("import sys\nsys.path.insert(0, %r)\nimport broken_gap\n" % str(tmp_path))
    with pytest.raises(SyntaxError) as info:
        runpy.run_path(str(path))
    err = depth.user_error(info.value, "s", f"importing {path}")
    assert f'File "{path}", line 3' in err.frames and "def g(X)" in err.frames


def test_with_every_frame_in_a_library_the_innermost_is_named(tmp_path, monkeypatch):
    """Where no frame lies outside the libraries, the innermost of theirs is named (line 6 of
    three nested calls; x_user_error__mutmut_56/58/62/63: none, or another frame)."""
    source = "def h():\n    raise KeyError('k')\n\ndef g():\n    h()\n\ndef f():\n    g()\n"
    e, path = _raised_by_their_code(tmp_path, source)
    here = os.path.dirname(os.path.abspath(__file__)) + "/"
    monkeypatch.setattr(depth, "_libraries", lambda: (str(tmp_path) + "/", here))
    assert str(depth.user_error(e, "s", "tracing s")).startswith(f"--forward: {path}:2: KeyError")


def test_an_error_a_skipped_library_raised_from_theirs_names_theirs(tmp_path):
    """A library under ``skip`` that re-raises their KeyError as its own RuntimeError: the
    RuntimeError's frames are all the library's (and this test's), so their KeyError is the
    one named (x_user_error__mutmut_11 read the library's frames as theirs)."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "wrap_gap.py").write_text("def wrap(fn):\n    try:\n        fn()\n"
                                     "    except KeyError as e:\n"
                                     "        raise RuntimeError('lib') from e\n")
    wrap = runpy.run_path(str(lib / "wrap_gap.py"))["wrap"]
    theirs = tmp_path / "theirs_gap.py"
    theirs.write_text("def f():\n    raise KeyError('k')\n")
    f = runpy.run_path(str(theirs))["f"]
    with pytest.raises(RuntimeError) as info:
        wrap(f)
    skip = (str(lib) + "/", os.path.dirname(os.path.abspath(__file__)) + "/")
    assert str(depth.user_error(info.value, "s", "tracing s", skip=skip)).startswith(
        f"--forward: {theirs}:2: KeyError: 'k' (raised while tracing s")


def test_the_note_names_each_group_on_its_own_line_from_the_bottom():
    """Two groups in one panel: the note is the heading and one line per group, its bottom on
    the corner (x_reveal__mutmut_43 joined the groups with "XX\\nXX", _36 dropped va)."""
    import matplotlib.pyplot as plt
    from harness.report import figures
    try:
        fig, (ax,), _ = _axes(([1, 2], [3, 4], {"label": "a"}), ([1, 2], [3, 4], {"label": "b"}),
                              ([1, 2], [7, 8], {"label": "c"}), ([1, 2], [7, 8], {"label": "d"}))
        assert figures.reveal(fig) == [["a", "b"], ["c", "d"]]
        note, = ax.texts
        assert note.get_text() == "lines that coincide (within 2%):\na = b\nc = d"
        assert note.get_verticalalignment() == "bottom"
    finally:
        plt.close("all")


def test_a_forward_that_lacks_an_input_is_named_by_its_name():
    """trace_forward names the forward in check_inputs' message: given, or its __name__
    (x_trace_forward__mutmut_56 passed None)."""
    def two(X, W):
        return X @ W
    with pytest.raises(ValueError, match=r"^shapes: mine takes no input named 'V'"):
        depth.trace_forward(two, {"X": ("T", "d"), "W": ("d", "d"), "V": ("d",)}, 4, 2, name="mine")
    with pytest.raises(ValueError, match=r"^shapes: two takes no input named 'V'"):
        depth.trace_forward(two, {"X": ("T", "d"), "W": ("d", "d"), "V": ("d",)}, 4, 2)


@pytest.mark.parametrize("view", ["transpose", "broadcast_to", "reshape_kept"])
def test_a_view_of_a_weight_is_that_weight_in_a_product(view):
    """A product with a transposed, broadcast or reshaped weight is named after the weight's
    part, as with the weight itself (x_Traced_transpose__mutmut_52/56, broadcast_to _21/_25,
    reshape_kept _32/_36 dropped the view's leaf, and the product read as "product")."""
    from harness.analysis import trace
    g = trace.Graph(weight_parts={"W": "projections"})
    X = trace.leaf(g, "X", (5, 4), ("T", "d_model"), source_row=0)
    W = trace.leaf(g, "W", (4, 4), ("d_model", "d_k"))
    Wv = {"transpose": lambda: W.transpose(), "broadcast_to": lambda: W.broadcast_to((1, 4, 4)),
          "reshape_kept": lambda: W.reshape_kept((1, 4, 4))}[view]()
    assert Wv.leaf == "W"
    X @ Wv
    assert g.ops[-1].part == "projections"


def _terms_field(rng, shape, how, lead=0, mixed=False):
    """A Field of ``shape`` held as 2 or 3 terms, each full or one wide on each of its last
    axes, and on its first ``lead`` axes full on all or on none (``mixed``: the first term full
    on the first of them alone)."""
    from harness.analysis.field import Field
    terms = []
    for i in range(int(rng.integers(2, 4))):
        full = rng.random() < 0.5
        first = [n if (full if not (mixed and i == 0) else j == 0) else 1
                 for j, n in enumerate(shape[:lead])]
        sub = tuple(first) + tuple(n if rng.random() < 0.5 else 1 for n in shape[lead:])
        dtype = np.float32 if how == "min" else np.int32
        terms.append(rng.integers(0, 50, size=sub).astype(dtype))
    return Field._raw(shape, terms, how) if hasattr(Field, "_raw") else Field(shape, terms, how)


@pytest.mark.parametrize("seed", range(12))
def test_reshape_terms_gives_the_dense_reshape_or_declines(seed):
    """trace._reshape_terms against the dense reshape, on Fields of several terms: one-wide axes
    added or dropped, and leading axes regrouped before the last two, each must keep terms and
    give the dense values; any other reshape is declined (x__reshape_terms__mutmut_2 to _69)."""
    from harness.analysis import trace
    rng = np.random.default_rng(seed)
    B, H, T = int(rng.integers(2, 4)), int(rng.integers(2, 4)), int(rng.integers(2, 5))
    cases = [((B, H, T, T), (B * H, T, T)), ((B * H, T, T), (B, H, T, T)),
             ((1, H, T, T), (H, T, T)), ((H, T, T), (1, H, 1, T, T)), ((T, T), (1, T, T)),
             ((1, T, 1, T), (T, T)), ((B, H, T, T), (B, H * T, T))]
    for src, dst in cases:
        for how in ("min", "max"):
            regroup = len(src) > 2 and len(dst) > 2 and src[-2:] == dst[-2:] and \
                [n for n in src if n != 1] != [n for n in dst if n != 1]
            f = _terms_field(rng, src, how, lead=len(src) - 2 if regroup else 0)
            if regroup and len(src) > 3:             # a term full on part of them: declined
                assert trace._reshape_terms(_terms_field(rng, src, how, len(src) - 2, True),
                                            dst) is None
            out = trace._reshape_terms(f, dst)
            if (src, dst) == cases[-1]:
                if out is not None:                  # T regrouped into the last two: dense only
                    np.testing.assert_array_equal(out.dense(), f.dense().reshape(dst))
                continue
            assert out is not None, (src, dst)
            assert out.shape == dst and out.how == how and len(out.terms) >= 1
            np.testing.assert_array_equal(out.dense(), f.dense().reshape(dst))


def test_traced_views_at_their_edges():
    """broadcast_to refuses what does not broadcast with its own message and labels the new
    axes "?" (x_Traced_broadcast_to__mutmut_10/13/16/17); reduce_axes drops the axes unless
    asked, over one axis of a vector by its negative index, and over two axes at once (_1, _9,
    _22); transpose takes a negative axis of a vector (_23); reshape_kept labels its axes "?"
    (_38) and gives the plain reshape's values (_3/_5/_8)."""
    from harness.analysis import trace
    g = trace.Graph(weight_parts={})
    X = trace.leaf(g, "X", (3, 1), ("T", "d_model"), source_row=0)
    with pytest.raises(ValueError, match=r"^trace: cannot broadcast \(3, 1\) to \(1, 4\)$"):
        X.broadcast_to((1, 4))
    b = X.broadcast_to((2, 3, 4))
    assert b.shape == (2, 3, 4) and b.axes == ("?", "T", "d_model")
    Y = trace.leaf(g, "Y", (2, 3, 4), ("a", "b", "c"), source_row=0)
    assert Y.reduce_axes("sum", [1]).shape == (2, 4)
    assert Y.reduce_axes("sum", [1], keepdims=True).shape == (2, 1, 4)
    assert Y.reduce_axes("max", [0, 2]).shape == (3,)
    v = trace.leaf(g, "v", (5,), ("T",))
    assert v.reduce_axes("sum", [-1]).shape == ()
    assert v.transpose((-1,)).shape == (5,)
    r = Y.reshape_kept((1, 6, 4))
    assert r.shape == (1, 6, 4) and r.axes == ("?", "?", "?")
    np.testing.assert_array_equal(r.dist, Y.reshape(1, 6, 4).dist)
