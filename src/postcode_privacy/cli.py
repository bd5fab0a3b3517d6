"""The command line: a thin layer over the library.

``main(argv)`` can be called from tests.  Library errors become exit codes in exactly one place,
:func:`main`, using ``EXIT_CODES``; messages name rows and reasons, never values.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import io
import os
import sys
import threading
from collections.abc import Iterator

import click

from . import errors
from ._interrupts import (
    EXIT_INTERRUPTED,
    first_stop_signal_only,
    ignore_stops,
    stop_message,
    stop_was_dropped,
)
from .version import OUTPUT_STABILITY_VERSION, __version__

# Documented in docs/cli.md.  Order matters: the first matching class wins.
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (errors.InputDataError, 3),
    (errors.KeyFileError, 4),
    (errors.OutputExistsError, 5),
    (errors.ArtefactError, 6),
    (errors.GraphError, 6),
    (errors.SourceDataError, 7),
    (errors.InvalidParameterError, 8),
    (errors.UnknownPostcodeError, 3),
    (errors.PostcodePrivacyError, 1),
]


class _Stopped(BaseException):
    """A stop (KeyboardInterrupt) on its way out of a command, past click: click prints an
    empty line on stderr for a KeyboardInterrupt that reaches it, so that "interrupted" came
    after a blank line, also in a log."""


EXIT_READER_GONE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader left


class _ReaderGone(BaseException):
    """Standard output's reader went away (EPIPE: a pipe into ``head``) while the command
    printed.  Not an OSError, so that click does not take it first: click ended such a run
    with exit code 1 and no word, or 0, whichever the timing gave (a hostile review)."""


@contextlib.contextmanager
def _reader_gone_is_its_own_end() -> Iterator[None]:
    """A broken pipe from printing becomes ``_ReaderGone``, which click does not take."""
    try:
        yield
    except BrokenPipeError as exc:
        if _raised_printing(exc):
            raise _ReaderGone() from exc
        raise


class _Commands(click.Group):
    def make_context(self, *args, **kwargs) -> click.Context:
        # The group's own --help and --version print while its arguments are parsed, before
        # ``invoke``: a reader gone then is the same as during a command.
        with _reader_gone_is_its_own_end():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context):
        # Every command prints the library's warnings as "warning: ..." lines: one that
        # reached Python's own display showed the install path, the class name and a source
        # line (``ledger check`` did, a hostile review found).  A command may show them
        # earlier itself (``perturb``, after its summary).
        from .commands._common import echo_warnings

        try:
            with echo_warnings(), _reader_gone_is_its_own_end():
                return super().invoke(ctx)
        except KeyboardInterrupt as stop:
            raise _Stopped() from stop


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__, message=f"%(prog)s %(version)s (output-stability {OUTPUT_STABILITY_VERSION})"
)
def cli() -> None:
    """Release UK postcodes under metric differential privacy on a postcode graph."""


def _exit_code(exc: BaseException) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(exc, cls):
            return code
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (never raises for library errors).

    Library messages name options the command-line way here (``--force``, ``--on-error``):
    see :func:`postcode_privacy.errors.option`.
    """
    return _main(argv, restore_signals=True)


def _main(argv: list[str] | None, *, restore_signals: bool) -> int:
    # The first Ctrl-C stops the run; later ones must not cut its clean-up short
    # (``_interrupts``).  The process's own run keeps ignoring them until it has exited.
    with first_stop_signal_only(restore=restore_signals):
        token = errors.SURFACE.set("cli")
        try:
            return _run(argv)
        finally:
            errors.SURFACE.reset(token)


class _StdoutClosed(OSError):
    """Raised by a write to a standard output that was closed when the process started."""


class _ClosedStdout(io.TextIOBase):
    """What ``sys.stdout`` is while a command runs with standard output closed (Python sets it
    to None, and click then drops what the command prints without a word: ``ledger show >&-``
    exited 0 having shown nothing, a hostile review).  A write fails as one to a full disk
    does (``_raised_printing``); a status line (``echo_status``) is still let go."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise _StdoutClosed(errno.EBADF, "standard output is closed")


def _run(argv: list[str] | None) -> int:
    closed = sys.stdout is None
    if closed:
        sys.stdout = _ClosedStdout()
    try:
        return _run_command(argv)
    finally:
        if closed:
            sys.stdout = None


def _run_command(argv: list[str] | None) -> int:
    try:
        cli.main(args=argv, prog_name="postcode-privacy", standalone_mode=False)
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, EOFError):
            # click turns any EOFError into Abort; one that escaped the readers is a file that
            # ended too early, not an interruption.
            click.echo(
                "error: a file ended unexpectedly (truncated?); nothing was written", err=True
            )
            return 1
        return _interrupted()
    except (KeyboardInterrupt, _Stopped):
        return _interrupted()
    except _ReaderGone:
        # As a writer killed by SIGPIPE ends, without a word: the reader chose to stop
        # reading.  Any file the command writes was written before it printed.
        _silence_stdout()
        return EXIT_READER_GONE
    except click.exceptions.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except OSError as exc:
        if not _raised_printing(exc):
            raise
        # Each command writes its files before it reports them, so only what it prints was
        # lost, e.g. to a full disk behind `> file`.
        click.echo(
            f"error: standard output could not be written ({exc.strerror or type(exc).__name__})"
            "; what the command printed is lost (any file it writes was written first)",
            err=True,
        )
        return 1
    except errors.PostcodePrivacyError as exc:
        # An InputDataError's summary: its listed records follow, one a line.
        click.echo(f"error: {getattr(exc, 'summary', exc)}", err=True)
        lines = getattr(exc, "row_lines", {})
        for row, reason in getattr(exc, "row_errors", []):
            line = f" (line {lines[row]})" if row in lines else ""
            click.echo(f"  row {row}: {reason}{line}", err=True)
        shown = len(getattr(exc, "row_errors", []))
        total = getattr(exc, "total_errors", shown)
        if total > shown:
            click.echo(f"  ... and {total - shown} more rows", err=True)
        return _exit_code(exc)
    if stop_was_dropped():  # (Python dropped the stop, and the command went on to its end)
        return _interrupted()
    return 0


def _interrupted() -> int:
    click.echo(stop_message(), err=True)
    return EXIT_INTERRUPTED


def _raised_printing(exc: OSError) -> bool:
    """Whether ``exc`` came from ``click.echo`` writing to standard output (a full disk behind
    ``> file``, say), not from the command's work: the innermost frame is click's ``echo``,
    writing to stdout."""
    if isinstance(exc, _StdoutClosed):
        return True
    trace = exc.__traceback__
    if trace is None:
        return False
    while trace.tb_next is not None:
        trace = trace.tb_next
    frame = trace.tb_frame
    return (
        frame.f_code.co_name == "echo"
        and frame.f_globals.get("__name__") == "click.utils"
        and not frame.f_locals.get("err", False)
    )


def echo_status(message: str) -> None:
    """Print a line on stdout about work that is already done.

    The work's outcome is the exit code: a stdout that is closed or whose reader has gone
    (EPIPE) must not turn a complete release into a failure, so such errors are ignored.
    """
    if sys.stdout is None or isinstance(sys.stdout, _ClosedStdout):  # started with it closed
        return
    try:
        click.echo(message)
        sys.stdout.flush()
    except (OSError, ValueError):
        _silence_stdout()


def _silence_stdout() -> None:
    # Later writes, and the interpreter's own flush at exit, go nowhere instead of failing.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def entry_point() -> None:
    code = _main(None, restore_signals=False)
    # The command is over, its outcome is ``code``: a stop now would only cut the exit short
    # (a KeyboardInterrupt in an exit handler, printed as "Exception ignored", exit code 0).
    ignore_stops()
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError):
        _silence_stdout()
    _exit_without_teardown(code)


def _exit_without_teardown(code: int) -> None:
    """End the process with ``code`` once everything it started has ended, skipping the
    interpreter's teardown.

    Freeing every object of pandas, numba and the graph one at a time took 0.3 to 0.4 s of a
    3 s release (docs/performance-history.md, "Twelfth round: an exit without teardown, and a
    search laid out along the map"), and nothing depends on it:
    the outputs are already renamed into place.  What a normal exit does that matters is done
    here, in CPython's order: the threading module's shutdown (its exit callbacks, which tell idle
    thread pools to stop, then a join of every non-daemon thread), the exit handlers
    (logging's flush, multiprocessing's, Spark's), a flush of the standard streams.  Under a
    profiler, tracer or debugger the exit is the normal one: such a tool writes its results
    after the command returns (``python -m cProfile -m postcode_privacy ...``).
    """
    if _watched():
        sys.exit(code)
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter calls first
    if shutdown is None:  # not CPython's threading module: let the interpreter exit
        sys.exit(code)
    shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _watched() -> bool:
    """Whether a profiler, tracer or debugger watches this process: through the hooks of
    ``sys.setprofile`` and ``sys.settrace``, or, from Python 3.12, as a ``sys.monitoring`` tool
    (cProfile is one there, and writes nothing after an exit without teardown)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:  # Python 3.11
        return False
    return any(monitoring.get_tool(tool) is not None for tool in range(6))


# Sub-commands register themselves on ``cli`` from their own modules; importing them here keeps
# the whole command surface visible in one place.
from . import commands  # noqa: E402,F401

if __name__ == "__main__":
    # ``python -m postcode_privacy.cli``: run the package's own copy of this module, on which the
    # sub-commands registered themselves (this file, run as __main__, is a second copy).
    from postcode_privacy.cli import entry_point as _package_entry_point

    _package_entry_point()
