"""Every exception the library raises on purpose.

Messages name rows, columns and reasons, never the postcode or identifier values themselves,
so that an error log is never a disclosure.  The CLI maps each class to one exit code
(see ``cli.EXIT_CODES``).
"""

from __future__ import annotations

import contextvars


class PostcodePrivacyError(Exception):
    """Base class for all errors raised by postcode-privacy."""


class InvalidParameterError(PostcodePrivacyError, ValueError):
    """A parameter (epsilon, radius, prior, option) is outside what the mechanism supports."""


class SubjectIdError(InvalidParameterError):
    """A subject identifier refused (docs/spec.md, "Subject identifiers"); the message says
    why, and never quotes the value."""


class GraphError(PostcodePrivacyError):
    """A graph is malformed, inconsistent, or unsupported."""


class ArtefactError(GraphError):
    """A graph artefact on disk is not one of ours, is corrupted, or has been edited."""


class KeyFileError(PostcodePrivacyError):
    """A key file is missing, malformed, truncated, or would be overwritten."""


class InputDataError(PostcodePrivacyError):
    """The records being released are unusable (missing column, bad encoding, bad rows...).

    For failing records, ``row_errors`` lists up to 20 ``(record, reason)`` pairs, the first
    five of which the message repeats; ``total_errors`` counts them all and ``summary`` is the
    message without the list.  Records are numbered from 1 in the input's order (record 3 is
    ``df.iloc[2]``, whatever the frame's index; in a CSV file, the third record after the
    header), and ``row_lines`` gives, for a CSV file, the line each listed record starts on.
    Reasons never quote a cell.
    """

    def __init__(
        self,
        message: str,
        row_errors: list[tuple[int, str]] | None = None,
        total_errors: int | None = None,
        row_lines: dict[int, int] | None = None,
    ):
        super().__init__(message)
        self.summary = message
        self.row_errors = list(row_errors or [])
        self.total_errors = total_errors if total_errors is not None else len(self.row_errors)
        # For a CSV file: the line of the file each listed record starts on (header: line 1).
        self.row_lines = dict(row_lines or {})

    def __str__(self) -> str:
        """The summary, then the first listed records, so that a Python traceback names the
        rows as the command line does (which prints the summary, then every listed record on
        a line of its own).  Reasons never quote a cell."""
        if not self.row_errors:
            return self.summary
        listed = [
            f"record {row}{self._line_text(row)}: {reason}"
            for row, reason in self.row_errors[:_RECORDS_IN_MESSAGE]
        ]
        more = self.total_errors - len(listed)
        if more > 0:
            listed.append(f"and {more} more")
        return f"{self.summary} [{'; '.join(listed)}]"

    def _line_text(self, row: int) -> str:
        return f" (line {self.row_lines[row]})" if row in self.row_lines else ""


_RECORDS_IN_MESSAGE = 5  # the rest are in ``row_errors`` (at most 20) and the command's output


class SourceDataError(PostcodePrivacyError):
    """A published source file (ONSPD, Code-Point Open, census) cannot be read."""


class OutputExistsError(PostcodePrivacyError):
    """Refusing to overwrite an existing file (or the input itself)."""


class WorkerLostError(PostcodePrivacyError):
    """A worker process ended before its work was done (killed, as the out-of-memory killer
    kills): the part of the work it held would never come back (records never drawn, a table
    never built), so the run stops."""


class UnknownPostcodeError(PostcodePrivacyError, KeyError):
    """A well-formed postcode that is not a node of the graph."""

    def __str__(self) -> str:  # KeyError would otherwise quote the repr
        return str(self.args[0]) if self.args else "postcode not in graph"


class TeleportWarning(UserWarning):
    """An explicit radius leaves the teleport probability bound above its 1e-6 target."""


class CacheWarning(RuntimeWarning):
    """A cached graph or engine table could not be used or written: the run goes on without it
    (slower, or building it again), never with different outputs."""


class DuplicateSubjectWarning(UserWarning):
    """One subject identifier appears with two or more different postcodes in a release."""


# How options are spelled in messages: the command line sets "cli" (see ``cli.main``), so the
# same library error says ``--on-error error`` there and ``on_error='error'`` from Python.
SURFACE: contextvars.ContextVar[str] = contextvars.ContextVar(
    "postcode_privacy_surface", default="python"
)


def option(name: str, value: str | None = None) -> str:
    """An option as the user wrote it: ``option("force")`` is ``--force`` on the command line
    and ``force=True`` in Python; ``option("on_error", "error")`` is ``--on-error error`` or
    ``on_error='error'``."""
    if SURFACE.get() == "cli":
        flag = "--" + name.replace("_", "-")
        return flag if value is None else f"{flag} {value}"
    return f"{name}=True" if value is None else f"{name}={value!r}"


def offers_option(name: str) -> bool:
    """Whether the caller can give ``name`` (``radius``): always from Python, and on the
    command line only where the running command has that option, so that a message never
    advises an option the command lacks (``example`` has no ``--radius``)."""
    if SURFACE.get() != "cli":
        return True
    import click

    context = click.get_current_context(silent=True)
    if context is None:
        return True
    return any(parameter.name == name for parameter in context.command.params)


def option_name(name: str) -> str:
    """An option's name as the user wrote it: ``--epsilon`` on the command line, ``epsilon``
    in Python."""
    return "--" + name.replace("_", "-") if SURFACE.get() == "cli" else name


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` attributed to the first caller outside this package: the user's line
    that asked for the work, however deep in the package the warning arose (a hand-counted
    ``stacklevel`` pointed into the package whenever the call path changed)."""
    import sys
    import types
    import warnings

    def ours(name: str) -> bool:
        return name == __package__ or name.startswith(f"{__package__}.")

    frame: types.FrameType | None = sys._getframe(1)
    level = 2  # (stacklevel 2: the function calling this one)
    while frame is not None and ours(frame.f_globals.get("__name__", "")):
        level, frame = level + 1, frame.f_back
    warnings.warn(message, category, stacklevel=level)
