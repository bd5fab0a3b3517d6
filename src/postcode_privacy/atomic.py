"""Files that appear whole or not at all.

Everything the library writes (artefacts, releases, manifests, reports) goes to a temporary file
beside its target, is flushed and fsynced, and only then moved into place with ``os.replace``:
a reader, or a run that is interrupted, sees the old file or the complete new one, never part.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from .errors import InvalidParameterError


class TempFile:
    """A new file beside ``target``, created exclusively; moved into place or removed."""

    def __init__(self, target: str | os.PathLike):
        self.target = Path(target)
        self.path = self.target.with_name(
            f".{self.target.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                         | getattr(os, "O_BINARY", 0), 0o666)
        except OSError as exc:
            raise InvalidParameterError(
                f"cannot write in the output directory: {exc.strerror or type(exc).__name__}") from None
        self.handle = os.fdopen(fd, "wb")

    def finish(self) -> None:
        """Flush and fsync; the file stays at its temporary name."""
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()

    def commit(self) -> None:
        os.replace(self.path, self.target)

    def discard(self) -> None:
        try:
            if not self.handle.closed:
                self.handle.close()
        except OSError:
            pass
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def fsync_directory(directory: str | os.PathLike) -> None:
    """Make a rename durable where the platform allows opening a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(target: str | os.PathLike):
    """A binary handle whose contents replace ``target`` only if the block completes."""
    temp = TempFile(target)
    try:
        yield temp.handle
        temp.finish()
        temp.commit()
    except BaseException:
        temp.discard()
        raise
    fsync_directory(temp.target.parent)


def write_atomic(target: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``target`` through a temporary file, replacing any existing file."""
    with atomic_output(target) as handle:
        handle.write(data)
