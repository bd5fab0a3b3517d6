"""Which table format a file name asks for, and opening an input as its name says.

``.csv`` (also ``.csv.gz``, ``.csv.bz2`` or ``.csv.xz``, compressed on the fly) or
``.parquet``/``.pq``; anything else is refused before any work.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import zlib

from ..errors import InvalidParameterError

__all__ = ["table_format", "open_decompressed", "READ_ERRORS", "os_reason"]

# What reading a (possibly compressed) file can raise besides a decoding error.
READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)

_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz")
_PARQUET_SUFFIXES = (".parquet", ".pq")


def table_format(path: str | os.PathLike) -> str:
    """``"csv"`` or ``"parquet"`` from the file name; InvalidParameterError otherwise."""
    name = os.fspath(path).lower()
    if name.endswith(_CSV_SUFFIXES):
        return "csv"
    if name.endswith(_PARQUET_SUFFIXES):
        return "parquet"
    raise InvalidParameterError(
        "cannot tell the table format from the file name: use .csv (optionally .gz, .bz2 or "
        ".xz), .parquet or .pq"
    )


def open_decompressed(path: str, name: str | None = None) -> gzip.GzipFile | io.BufferedReader:
    """``path`` opened for reading, decompressed as the file name (or ``name``) says.

    A ``.bz2`` or ``.xz`` file is read by :class:`_WholeStreams`, which refuses data after a
    stream that does not start another one; Python's own readers stop there silently, and the
    records after it would be lost without a word.  (``gzip`` refuses such data itself.)"""
    lower = (path if name is None else name).lower()
    if lower.endswith(".gz"):
        return gzip.open(path, "rb")
    if lower.endswith(".bz2"):
        return io.BufferedReader(_WholeStreams(path, bz2.BZ2Decompressor, padding=False))
    if lower.endswith(".xz"):
        return io.BufferedReader(_WholeStreams(path, lzma.LZMADecompressor, padding=True))
    return open(path, "rb")


_BLOCK = 1 << 16


class _WholeStreams(io.RawIOBase):
    """The bytes of a bzip2 or xz file made of one or more whole compressed streams.

    After each stream, what follows must be another stream, or nothing (for xz, zero bytes of
    stream padding may come between): anything else raises :class:`OSError`, or
    :class:`lzma.LZMAError` from the decompressor, and a stream cut short raises
    :class:`EOFError`.  All three are :data:`READ_ERRORS`: "damaged or ends early"."""

    def __init__(self, path: str, decompressor, *, padding: bool):
        self._file = open(path, "rb")
        self._make = decompressor
        self._padding = padding
        self._stream = decompressor()
        self._unfed = b""  # compressed bytes read from the file, not yet given to a stream
        self._begun = False  # whether the current stream has been given any byte

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = len(buffer)
        while True:
            if self._stream.eof and not self._next_stream():
                return 0
            if self._stream.needs_input:
                data = self._unfed or self._file.read(_BLOCK)
                self._unfed = b""
                if not data:
                    if self._begun:
                        raise EOFError("the compressed input ends inside a stream")
                    return 0  # an empty file: no stream at all, as Python's readers allow
                self._begun = True
                out = self._stream.decompress(data, size)
            else:
                out = self._stream.decompress(b"", size)
            if out:
                buffer[: len(out)] = out
                return len(out)

    def _next_stream(self) -> bool:
        """Start the stream after the one just ended; False at the end of the file."""
        rest = self._stream.unused_data
        while True:
            if self._padding:
                rest = rest.lstrip(b"\0")
            if rest:
                break
            rest = self._file.read(_BLOCK)
            if not rest:
                return False
        self._stream = self._make()
        self._unfed = rest
        self._begun = False
        return True

    def close(self) -> None:
        self._file.close()
        super().close()


def os_reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__
