"""The command line's first step: load it under a guard against Ctrl-C, SIGTERM and SIGHUP.

The commands import numpy, pandas and the graph code, a fifth of a second in which Python's
own handlers were the ones in place: a Ctrl-C then printed a traceback, and a SIGTERM ended
the process with no word.  The package's ``__init__`` loads none of them (its public names
are imported on first use), so the guard is in place within milliseconds of the start, and a
stop while the rest loads is reported as any other stop (``cli``; docs/release.md, "Nothing
is lost").  Only Python's own start-up comes before it.
"""

from __future__ import annotations

import sys

from ._interrupts import (
    EXIT_INTERRUPTED,
    handle_stops,
    ignore_stops,
    quiet_about_dropped_stops,
    stop_message,
)


def entry_point() -> None:
    try:
        handle_stops()
        # (a stop dropped while the rest loads, in an import's callback, is not printed: the
        # command, once it begins, stops on it: _interrupts.first_stop_signal_only)
        sys.unraisablehook = quiet_about_dropped_stops(sys.unraisablehook)
        from .cli import entry_point as run_command_line

        # ``stop_once`` stays in place: it is the handler the commands install (``cli``),
        # and a stop in the few steps before they take over is caught here.
        run_command_line()
    except KeyboardInterrupt:
        ignore_stops()
        # (after the command's own handling, e.g. while its closing lines are flushed: its
        # files may be complete, and then it says so)
        sys.stderr.write(stop_message() + "\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
