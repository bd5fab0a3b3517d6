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


def open_decompressed(
    path: str, name: str | None = None
) -> gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile | io.BufferedReader:
    """``path`` opened for reading, decompressed as the file name (or ``name``) says."""
    lower = (path if name is None else name).lower()
    if lower.endswith(".gz"):
        return gzip.open(path, "rb")
    if lower.endswith(".bz2"):
        return bz2.open(path, "rb")
    if lower.endswith(".xz"):
        return lzma.open(path, "rb")
    return open(path, "rb")


def os_reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__
