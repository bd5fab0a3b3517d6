"""SHA-256 of a file's bytes or of a stream's, computed in one place.

Manifests, audit files, graph provenance and the ledger all record such digests; each is
``hashlib.file_digest`` over the file, in blocks, so a large file stays out of memory.
"""

from __future__ import annotations

import hashlib
import io
import os

__all__ = ["sha256_of_file", "sha256_of_stream"]


class _Stream(io.RawIOBase):
    """``handle`` as a reader without a file descriptor.  ``hashlib.file_digest`` may hash a
    file through its descriptor instead of reading it; a decompressing reader (gzip, bz2, xz)
    reports the compressed file's descriptor, and its digest would be the compressed bytes'."""

    def __init__(self, handle: io.BufferedIOBase):
        self._handle = handle

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return self._handle.readinto(buffer)


def sha256_of_stream(handle: io.BufferedIOBase) -> str:
    """Hex SHA-256 of what reading the binary ``handle`` to its end gives."""
    return hashlib.file_digest(_Stream(handle), "sha256").hexdigest()


def sha256_of_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of the bytes of the file at ``path``."""
    with open(path, "rb") as handle:
        return sha256_of_stream(handle)
