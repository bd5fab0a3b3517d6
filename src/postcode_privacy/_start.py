"""The command line's first step: load it under a guard against Ctrl-C.

The commands import numpy, pandas and the graph code, a fifth of a second in which Python's
own SIGINT handler is the one in place: a Ctrl-C then printed a traceback.  The package's
``__init__`` loads none of them (its public names are imported on first use), so this module
is in place within milliseconds of the start, and a stop while the rest loads is reported as
any other stop (``cli``; docs/release.md, "Nothing is lost").
"""

from __future__ import annotations

import sys

_EXIT_INTERRUPTED = 130  # as ``cli.EXIT_INTERRUPTED``, which is not loaded yet


def entry_point() -> None:
    try:
        from .cli import entry_point as run_command_line
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(_EXIT_INTERRUPTED) from None
    run_command_line()
