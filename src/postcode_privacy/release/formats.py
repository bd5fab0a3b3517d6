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

__all__ = ["table_format", "is_compressed", "open_decompressed", "READ_ERRORS", "os_reason"]

# What reading a (possibly compressed) file can raise besides a decoding error.
READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)

_COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz")
_CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.xz")
_PARQUET_SUFFIXES = (".parquet", ".pq")
_SPREADSHEET_SUFFIXES = (".xlsx", ".xlsm", ".xls", ".xlsb", ".ods", ".numbers")
_SPREADSHEET_ADVICE = {
    "input": "; spreadsheets are not read: save the sheet as CSV (UTF-8)",
    "output": "; spreadsheets are not written: name the output .csv or .parquet",
}


def table_format(path: str | os.PathLike, what: str = "file") -> str:
    """``"csv"`` or ``"parquet"`` from the file name; InvalidParameterError otherwise, naming
    ``what`` ("input", "output") and saying so of a spreadsheet, whose obvious next step
    (renaming it ``.csv``) would only meet an encoding error."""
    name = os.fspath(path).lower()
    if name.endswith(_CSV_SUFFIXES):
        return "csv"
    if name.endswith(_PARQUET_SUFFIXES):
        return "parquet"
    spreadsheet = name.endswith(_SPREADSHEET_SUFFIXES)
    raise InvalidParameterError(
        f"cannot tell the {what}'s table format from its name: use .csv (optionally .gz, .bz2 "
        "or .xz), .parquet or .pq"
        + (_SPREADSHEET_ADVICE.get(what, _SPREADSHEET_ADVICE["input"]) if spreadsheet else "")
    )


def is_compressed(name: str | os.PathLike) -> bool:
    """Whether a file of this name is compressed (``.gz``, ``.bz2`` or ``.xz``)."""
    return os.fspath(name).lower().endswith(_COMPRESSED_SUFFIXES)


def open_decompressed(path: str, name: str | None = None) -> gzip.GzipFile | io.BufferedReader:
    """``path`` opened for reading, decompressed as the file name (or ``name``) says.

    A ``.bz2`` or ``.xz`` file is read by :class:`_WholeStreams`, which refuses data after a
    stream that does not start another one; Python's own readers stop there silently, and the
    records after it would be lost without a word.  (``gzip`` refuses such data itself.)"""
    lower = (path if name is None else name).lower()
    if lower.endswith(".gz"):
        return gzip.open(path, "rb")
    if lower.endswith((".bz2", ".xz")):
        return io.BufferedReader(_WholeStreams(path, xz=lower.endswith(".xz")))
    return open(path, "rb")


_BLOCK = 1 << 16
_XZ_MAGIC = b"\xfd7zXZ\x00"  # the first bytes of an xz stream
_LZMA_HEADER = 13  # a legacy .lzma stream's header: properties, dictionary size, length
# How a file of each compressed format starts; an xz file may instead hold a legacy .lzma
# stream, whose header `_legacy_lzma_start` checks.
_STARTS = {
    "gz": ("gzip", (b"\x1f\x8b",)),
    "bz2": ("bzip2", (b"BZh",)),
    "xz": ("xz", (_XZ_MAGIC,)),
}


def compression_named_but_absent(path: str) -> tuple[str, str] | None:
    """(the name's suffix, its format's name) if ``path`` is named for a compression ("gz",
    "bz2" or "xz") but has bytes that do not start as that format does (a plain CSV named
    ``.csv.gz``, say), else None: a read that failed then says what is wrong, not "damaged"."""
    suffix = path.lower().rsplit(".", 1)[-1]
    if suffix not in _STARTS:
        return None
    name, starts = _STARTS[suffix]
    try:
        with open(path, "rb") as handle:
            first = handle.read(_LZMA_HEADER)
    except OSError:
        return None
    # (a file shorter than the format's first bytes, which start them, is one cut short)
    named = any(first[: len(start)] == start[: len(first)] for start in starts)
    named = named or (suffix == "xz" and _legacy_lzma_start(first))
    return (suffix, name) if first and not named else None


def _legacy_lzma_start(first: bytes) -> bool:
    """Whether ``first`` (up to 13 bytes) could begin a legacy .lzma stream as Python's
    automatic decoder accepts one (liblzma's strict header check): a properties byte naming
    lc, lp and pb with lc + lp at most 4 (xz and Python write 0x5d), a dictionary size of 2^n
    or 2^n + 2^(n-1) (or all ones), and an unknown length (all ones) or one under 2^38.
    Text that merely starts with "]" fails it, so a plain CSV named .xz is called that, not
    damaged (a hostile review): no four bytes of text without NUL make such a size."""
    if not first:
        return False
    properties = first[0]
    if properties >= 9 * 5 * 5 or properties % 9 + properties // 9 % 5 > 4:
        return False
    if len(first) >= 5:
        size = int.from_bytes(first[1:5], "little")
        rounded = size - 1
        for shift in (2, 3, 4, 8, 16):  # liblzma's rounding, which lets 2^n + 2^(n-1) pass
            rounded |= rounded >> shift
        if size != 0xFFFFFFFF and rounded + 1 != size:
            return False
    if len(first) >= _LZMA_HEADER:
        length = int.from_bytes(first[5:13], "little")
        return length == (1 << 64) - 1 or length < (1 << 38)
    return True


class _WholeStreams(io.RawIOBase):
    """The bytes of a bzip2 or xz file made of one or more whole compressed streams.

    After each stream, what follows must be another stream, or nothing.  For xz, as ``xz``
    itself reads a file: stream padding (zero bytes, in whole 4-byte words) may come after a
    stream, and only xz streams may follow one; a legacy ``.lzma`` stream stands alone.
    Anything else raises :class:`OSError`, or :class:`lzma.LZMAError` from the decompressor,
    and a stream cut short raises :class:`EOFError`.  All three are :data:`READ_ERRORS`:
    "damaged or ends early"."""

    def __init__(self, path: str, *, xz: bool):
        self._file = open(path, "rb")
        self._xz = xz
        # Whether the file starts an xz stream, which padding and more xz streams may follow.
        self._concatenable = not xz or self._file.peek(len(_XZ_MAGIC)).startswith(_XZ_MAGIC)
        self._stream = self._decompressor(first=True)
        self._unfed = b""  # compressed bytes read from the file, not yet given to a stream
        self._begun = False  # whether the current stream has been given any byte

    def _decompressor(self, *, first: bool):
        if not self._xz:
            return bz2.BZ2Decompressor()
        return lzma.LZMADecompressor(format=lzma.FORMAT_AUTO if first else lzma.FORMAT_XZ)

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
        rest, padding = self._stream.unused_data, 0
        while True:
            if self._xz:
                kept = rest.lstrip(b"\0")
                padding, rest = padding + len(rest) - len(kept), kept
            if rest:
                break
            rest = self._file.read(_BLOCK)
            if not rest:
                break
        if padding % 4 or ((padding or rest) and not self._concatenable):
            raise OSError("the compressed input has data after a stream that is not another")
        if not rest:
            return False
        self._stream = self._decompressor(first=False)
        self._unfed = rest
        self._begun = False
        return True

    def close(self) -> None:
        self._file.close()
        super().close()


def os_reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__
