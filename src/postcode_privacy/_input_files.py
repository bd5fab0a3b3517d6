"""Reading the small files a user names (a release's manifest, say) without trusting them.

A name given on the command line may be anything: a FIFO that never ends or that nobody writes
to, ``/dev/zero``, a 10 GB file, a directory.  :func:`read_small_file` opens it without
blocking, refuses anything that is not a regular file, and reads at most ``limit + 1`` bytes,
so a hostile or mistaken name costs neither memory nor a hung run.  :func:`open_regular_file`
is the same check for a file too large to read at once (a source CSV, a zip): it hands back
the open file, judged by the file opened and not by whatever the name points to a moment later.

:func:`parse_json` is the strict reading of JSON that such files get: a key given twice in
one object (where ``json`` would silently keep the last one), ``NaN`` or ``Infinity`` (not
JSON at all), text that is not UTF-8, an empty file, or nesting too deep to parse is each
refused with its own message, never a traceback.  A UTF-8 byte order mark is ignored, as
RFC 8259 allows.
"""

from __future__ import annotations

import io
import json
import os
import stat

from ._file_names import readable_name

__all__ = [
    "open_regular_file",
    "read_small_file",
    "parse_json",
    "visible_text",
    "missing_file_message",
    "MIB",
]

MIB = 1 << 20


def open_regular_file(
    path: str | os.PathLike, *, what: str, error: type[Exception]
) -> io.BufferedReader:
    """The regular file at ``path``, opened for reading in binary.

    Raises ``error`` (naming ``what``, e.g. "the population file", and the reason, never the
    content) if the file cannot be opened or is not a regular file: a FIFO (which could block
    the run for ever), a device such as ``/dev/zero`` (which never ends), a directory or a
    socket.  The name is opened without blocking and the check is made on the open file.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)  # without blocking: opening a FIFO must not wait for a writer
    except FileNotFoundError:
        raise error(missing_file_message(what, path)) from None
    except IsADirectoryError:
        raise error(f"{what} is a directory, not a file") from None
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or type(exc).__name__}") from None
    except ValueError:  # (Python's "embedded null byte": no file can have such a name)
        raise error(f"{what}'s path holds a NUL character: no file has such a name") from None
    mode = os.fstat(fd).st_mode  # of the file opened, not of whatever the name is now
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a pipe, device or socket"
        raise error(f"{what} is not a regular file ({kind})")
    return os.fdopen(fd, "rb")  # O_NONBLOCK means nothing for a regular file


def missing_file_message(what: str, path: str | os.PathLike) -> str:
    """ "<what> does not exist: <path>", the path as given (control and direction characters
    made visible) and, for a relative one, the directory it was looked for in: the commonest
    slip is running a command from another directory than the docs'.  The path is the user's
    own argument, never a cell of their data."""
    given = readable_name(path)  # (a byte that is not UTF-8 as \xNN, not Python's \udcNN)
    shown = visible_text(given)
    # (a source file is named by its own name: "nope.csv does not exist", not twice)
    message = f"{what} does not exist" + ("" if shown == what else f": {shown}")
    if not os.path.isabs(given):
        try:
            message += f" (looked for in {visible_text(readable_name(os.getcwd()))})"
        except OSError:  # (the current directory was removed)
            pass
    return message


def read_small_file(
    path: str | os.PathLike, *, what: str, limit: int, error: type[Exception]
) -> bytes:
    """The bytes of the regular file at ``path``, at most ``limit`` of them.

    Raises ``error`` (naming ``what``, e.g. "the manifest", and the reason, never the content)
    if the file cannot be opened, is not a regular file (a FIFO, a device, a directory), or
    holds more than ``limit`` bytes.  Postcondition: at most ``limit + 1`` bytes were read.
    """
    with open_regular_file(path, what=what, error=error) as handle:
        # A file already larger than the limit is refused without reading any of it.
        too_large = os.fstat(handle.fileno()).st_size > limit
        try:
            data = b"" if too_large else handle.read(limit + 1)
        except OSError as exc:
            raise error(f"cannot read {what}: {exc.strerror or type(exc).__name__}") from None
    if too_large or len(data) > limit:
        raise error(f"{what} is larger than {limit // MIB} MiB: it cannot be one")
    return data


def _refuse_constant(name: str):
    raise _NotJson(f"holds {name}, which is not JSON")


class _NotJson(ValueError):
    """Why a text is refused, in words that echo nothing of it."""


def _no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            # The key is a field name from our own formats, or text a user wrote: shown with
            # control and direction characters made visible (it could otherwise reorder the
            # message on a terminal).
            shown = key if len(key) <= 40 else key[:40] + "..."
            raise _NotJson(f'gives the key "{visible_text(shown)}" twice in one object')
        seen[key] = value
    return seen


def parse_json(data: bytes, *, what: str, error: type[Exception]) -> object:
    """``data`` parsed as strict JSON (see the module doc); raises ``error`` naming ``what``."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data.strip():
        raise error(f"{what} is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{what} is not UTF-8 text (JSON files are UTF-8)") from None
    try:
        return json.loads(
            text, object_pairs_hook=_no_duplicate_keys, parse_constant=_refuse_constant
        )
    except _NotJson as exc:
        raise error(f"{what} {exc}") from None
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; so is an integer
        # of more digits than Python converts
        raise error(f"{what} is not a JSON file") from None


# Characters that can make a text read other than it is: controls (C0, DEL, C1), format
# characters (among them the direction overrides, isolates and marks U+202A-U+202E,
# U+2066-U+2069, U+200E, U+200F, U+061C, and zero-width characters), line and paragraph
# separators, and lone surrogates (which cannot even be written as UTF-8).
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def visible_text(text: str) -> str:
    """``text`` with every control, format (bidirectional override, isolate, mark, zero-width)
    and separator character written as a visible escape: ``\\u202e``, ``\\u0007``.

    What a user's file says reaches a report page, its JSON and the terminal only through
    this, so that no such character can reverse or hide part of what is shown."""
    import unicodedata

    if text.isprintable() and text.isascii():
        return text
    return "".join(
        (f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
        if unicodedata.category(c) in _HIDDEN_CATEGORIES
        else c
        for c in text
    )
