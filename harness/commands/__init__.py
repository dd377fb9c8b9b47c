"""One module per subcommand, named as the subcommand.

Each provides ``HELP`` (one line), ``DESCRIPTION`` (with an example),
``add_arguments(parser)`` and ``run(args) -> int``. A command module imports
only the standard library and ``harness.infra.config`` at the top: NumPy, pandas,
Numba and the analysers are imported inside ``run``, so that ``--help`` and a
usage error answer at once.
"""

from __future__ import annotations

from harness.infra.files import UsageError

# subcommand -> module that implements it, in the order --help lists them
COMMANDS = {
    "report": "harness.commands.report",
    "decay": "harness.commands.decay",
    "depth": "harness.commands.depth",
    "compare": "harness.commands.compare",
    "roofline": "harness.commands.roofline",
}


def validated(check, config, flags, memory_flag=None):
    """``check(config)`` once; a ValueError or TypeError naming a field becomes a UsageError
    naming the field's flag (``flags``: field -> flag), a MemoryError one naming ``memory_flag``."""
    try:
        check(config)
    except (ValueError, TypeError) as e:
        msg = str(e)
        field = msg.split(" ", 1)[0]
        if field in flags:
            raise UsageError(f"{flags[field]}: {msg}") from None
        raise UsageError(msg) from None
    except MemoryError as e:
        raise UsageError(f"{memory_flag}: {e}" if memory_flag else str(e)) from None
    return config


def numbers(values):
    return " ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
