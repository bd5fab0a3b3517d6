"""Reading and writing key files (the I/O half of ``mechanism.keys``).

Key files are owner-only (mode 0600): written so, and refused when read if group or others
have any access, because whoever can read the file holds its secret: a release key undoes the
protection of every release made with it, and a ledger's secret, with its database, tests
guesses of who is in the ledger and where (docs/threat-model.md, "Key handling"; docs/ledger.md).  The same rules and
words serve both, so no message here speaks of releases alone.

A file that is not a key file at all (the wrong size, the wrong format) is refused as such
before its permissions are judged: advice to ``chmod 600`` a file that is no key would mislead.
No message ever shows a byte of the file.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from ._input_files import missing_file_message, visible_text
from ._signal_holds import signals_deferred
from .atomic import refuse_directory_path
from .errors import KeyFileError
from .mechanism.keys import Key

ENV_VAR = "POSTCODE_PRIVACY_KEY"


def refuse_unusable_key_path(path: str | os.PathLike) -> None:
    """Refuse an empty path, and one that names a directory (``a.key/``) as written."""
    if not os.fspath(path):
        raise KeyFileError("the key file path is empty; give the key file's name")
    refuse_directory_path(path, "key file", KeyFileError)  # "a.key/" is not "a.key"


def write_key_file(key: Key, path: str | os.PathLike) -> None:
    """Create ``path`` exclusively with owner-only permissions; never overwrite."""
    refuse_unusable_key_path(path)
    data = key.to_file_bytes()
    created = False
    try:
        # A stop that came between the file's creation and ``created = True`` would leave an
        # empty key blocking the next try: it is held until the flag is set, then delivered.
        with signals_deferred():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                # Whatever is there (an older key, a file of data), replacing it could lose
                # a key.
                raise KeyFileError(
                    f"refusing to overwrite {visible_text(os.fsdecode(path))}: a file already "
                    "exists there (a key file is never written over another file); choose a "
                    "new name"
                ) from None
            except FileNotFoundError:
                raise KeyFileError(
                    "the key file's directory does not exist; create it first"
                ) from None
            except OSError as exc:
                raise KeyFileError(f"cannot create key file: {exc.strerror}") from None
            created = True
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException as exc:
        # Whatever stopped the write (a full disk, Ctrl-C), a part-written key would only
        # block the next try: it is no key yet, so it goes.
        if created:
            Path(path).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise KeyFileError(f"cannot write key file: {exc.strerror}") from None
        raise


def _refuse_open_mode(mode: int) -> None:
    """Refuse a key file that group or others may read or write (POSIX permissions)."""
    if mode & 0o077:
        raise KeyFileError(
            f"the key file is open to group or others (mode {mode:04o}); whoever can read it "
            "holds its secret, which must stay as private as the true data: run `chmod 600` "
            "on it (and check who may already have read it)"
        )


_MAX_KEY_FILE_BYTES = 4096  # a key file is a few lines of text
_PIPE_WAIT_S = 10.0  # how long a key pipe may take, in all, to send a key and close


def _read_pipe(fd: int) -> bytes:
    """All a pipe holds, read without blocking for ever: a FIFO nobody writes to ends at
    once (no writer: end of file), one whose writer has not sent the key and closed within
    ``_PIPE_WAIT_S`` seconds of the first read is given up, and more than a key file holds is
    not read."""
    import select

    data = b""
    deadline = time.monotonic() + _PIPE_WAIT_S
    while len(data) <= _MAX_KEY_FILE_BYTES:
        try:
            chunk = os.read(fd, _MAX_KEY_FILE_BYTES + 1)  # b"": no writer, or the end
        except BlockingIOError:  # a writer, nothing written yet: wait, but not for ever
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                what = "was not closed" if data else "sent nothing"
                raise KeyFileError(
                    f"the key pipe {what} within {_PIPE_WAIT_S:g} s; a key must arrive whole "
                    "and the pipe be closed"
                ) from None
            continue
        if not chunk:
            break
        data += chunk
    return data


def read_key_file(path: str | os.PathLike) -> Key:
    """Read a key file, refusing one that is not a regular file or a pipe, not a key file, or
    not owner-only (``_refuse_open_mode``), in that order.

    The file is opened without blocking and checked through that one handle, so the mode
    checked is that of the file read, not of whatever the name pointed to a moment before.  A
    pipe is read too (``--key <(secret-tool lookup ...)``), but never waited on for ever: a
    FIFO nobody writes to is an empty key file at once (``_read_pipe``).  A device or a
    directory is refused as not a key file (``/dev/null`` or a directory would be judged by a
    mode that means nothing for them)."""
    refuse_unusable_key_path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise KeyFileError(missing_file_message("the key file", path)) from None
    except IsADirectoryError:
        raise KeyFileError("the key file is not a regular file or a pipe (a directory)") from None
    except OSError as exc:
        raise KeyFileError(f"cannot read key file: {exc.strerror}") from None
    info = os.fstat(fd)
    pipe = stat.S_ISFIFO(info.st_mode)  # `--key <(secret-tool lookup ...)`, or a named FIFO
    if not (stat.S_ISREG(info.st_mode) or pipe):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a device or socket"
        raise KeyFileError(f"the key file is not a regular file or a pipe ({kind})")
    with os.fdopen(fd, "rb") as handle:
        try:
            data = _read_pipe(fd) if pipe else handle.read(_MAX_KEY_FILE_BYTES + 1)
        except OSError as exc:
            raise KeyFileError(f"cannot read key file: {exc.strerror}") from None
    if len(data) > _MAX_KEY_FILE_BYTES:
        raise KeyFileError("the key file is too large to be a key file")
    key = Key.from_file_bytes(data)  # not a key file: said first, whatever its mode
    if os.name == "posix":
        _refuse_open_mode(stat.S_IMODE(info.st_mode))  # the mode of the very file read
    return key


def key_from_environment() -> Key | None:
    """The key-file text held in $POSTCODE_PRIVACY_KEY, for pipelines; None if unset."""
    text = os.environ.get(ENV_VAR)
    if text is None:
        return None
    try:
        return Key.from_file_bytes(text.encode("ascii", errors="replace"))
    except KeyFileError:
        if _names_a_file(text):  # an easy slip: the file's name, not its text
            raise KeyFileError(
                "it holds the name of a file, not a key file's text: set it to the file's "
                f'text ({ENV_VAR}="$(cat KEYFILE)") or give --key KEYFILE'
            ) from None
        raise


def _names_a_file(text: str) -> bool:
    """Whether ``text`` is one line naming an existing file (never echoed: it may be a key)."""
    if not text or "\n" in text or "\x00" in text or len(text) > 4096:
        return False
    try:
        return os.path.isfile(text)
    except (OSError, ValueError):
        return False
