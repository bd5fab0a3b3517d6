"""Writing released records incrementally, as CSV or Parquet, byte-identically on every run.

The format follows the output's name (``formats.table_format``).  Writers round-trip: reading a
CSV release back with ``pandas.read_csv(..., dtype=str, keep_default_na=False)`` gives every
cell exactly as it went in, carriage returns included; a Parquet input's typed cells are
written by the rules of ``csv_text.py``, whose text reads back as the same values.  Nothing in
a file's bytes depends on the chunk size the input was read with.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import platform
import zlib
from typing import Any, BinaryIO

import pandas as pd

from .._digest import sha256_of_stream
from ..errors import InputDataError
from .arrow_types import dictionaries_of_their_own
from .column_labels import column_label
from .csv_text import Unshowable, named_time_zones, series_text, tz_database
from .formats import is_compressed, open_decompressed, table_format

__all__ = ["open_writer", "written_with", "uncompressed_sha256"]


_QUOTED_CHARACTERS = ',"\r\n'


def _quote_cell(cell: str) -> str:
    return '"' + cell.replace('"', '""') + '"'


def _csv_rows(columns: list[list[str | None]]) -> str:
    """CSV text of the records whose cells are ``columns`` (text, or None for an empty cell),
    one line each, ended by LF.  A cell is quoted when it holds a comma, a double quote, CR or
    LF, and so is the empty cell of a one-column record (else the line would be empty); the
    rule is applied here, cell by cell, rather than by the csv module, which leaves a bare CR
    unquoted (readers then see a line break).  For text it is the csv module's own rule
    otherwise, so a CSV input's cells are written as pandas wrote them (a test compares)."""
    if not columns or not columns[0]:
        return ""
    width, rows = len(columns), len(columns[0])
    pieces: list[str] = [""] * (2 * width * rows)
    for position, column in enumerate(columns):
        cells: list[str] = [cell or "" for cell in column]  # None: an empty cell
        # One search of the joined cells (in C) clears most columns at once.
        if any(character in "".join(cells) for character in _QUOTED_CHARACTERS):
            cells = [
                _quote_cell(cell) if any(c in cell for c in _QUOTED_CHARACTERS) else cell
                for cell in cells
            ]
        if width == 1:
            cells = ['""' if cell == "" else cell for cell in cells]
        pieces[2 * position :: 2 * width] = cells
        separator = "\n" if position == width - 1 else ","
        pieces[2 * position + 1 :: 2 * width] = [separator] * rows
    return "".join(pieces)


def _compressor(handle: BinaryIO, name: str) -> gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile | None:
    lower = name.lower()
    if lower.endswith(".gz"):
        return gzip.GzipFile(filename="", mode="wb", fileobj=handle, mtime=0)
    if lower.endswith(".bz2"):
        return bz2.BZ2File(handle, "wb")
    if lower.endswith(".xz"):
        return lzma.LZMAFile(handle, "wb")
    return None


class _CsvWriter:
    """Writes chunks as CSV text (gzip without a timestamp, so outputs are byte-identical).

    Every cell is turned into text by one rule per type (``csv_text.py``), then quoted by one
    rule (``_csv_rows``), whatever else the chunk holds: a cell's text never depends on its
    neighbours, its chunk or the version of pandas."""

    def __init__(self, handle: BinaryIO, name: str, input_columns: list):
        self._input_columns = input_columns  # messages name a column where the input has it
        # The compressing layer the name asks for (None: plain CSV); closed here, since closing
        # it writes the compressed stream's trailer.
        self._inner = _compressor(handle, name)
        raw = handle if self._inner is None else self._inner
        self._text = io.TextIOWrapper(raw, encoding="utf-8", newline="", write_through=False)
        self._header_written = False

    def _header(self, columns: list) -> None:
        text = _csv_rows([[str(name)] for name in columns])
        if text.startswith("\ufeff"):
            # A first name starting with U+FEFF would begin the file with the bytes of a
            # byte-order mark, which readers drop: quoted, the file starts with the quote.
            first = str(columns[0])
            text = _quote_cell(first) + text[len(first) :]
        self._text.write(text)
        self._header_written = True

    def write(self, frame: pd.DataFrame) -> None:
        import pyarrow as pa

        cells = []
        for position in range(frame.shape[1]):
            try:
                cells.append(series_text(frame.iloc[:, position]))
            except (Unshowable, pa.ArrowException) as exc:
                # The reader refuses such values first, naming the record: this is a backstop.
                why = exc.why if isinstance(exc, Unshowable) else "a value of no known type"
                label = column_label(frame.columns[position], self._input_columns)
                raise InputDataError(
                    f"{label} holds {why}, which CSV output cannot show; release to a "
                    ".parquet output instead"
                ) from None
        if not self._header_written:
            self._header(list(frame.columns))
        self._text.write(_csv_rows(cells))

    def close(self, columns: list) -> None:
        if not self._header_written:
            self._header(columns)
        self._text.flush()
        self._text.detach()
        if self._inner is not None:
            self._inner.close()

    def abort(self) -> None:
        """Drop buffered output without raising (the file is about to be removed)."""
        try:
            self._text.detach()
        except (ValueError, OSError):
            pass


# The Parquet layout, spelled out instead of left to pyarrow's defaults: a pyarrow release that
# changed a default would otherwise change the bytes of a release (these were the defaults of
# pyarrow 15 to 26).
_PARQUET_LAYOUT = {
    "version": "2.6",
    "compression": "snappy",
    "use_dictionary": True,
    "write_statistics": True,
    "data_page_version": "1.0",
    "use_compliant_nested_type": True,
    "store_schema": True,
    "write_page_index": False,
    "write_page_checksum": False,
}


class _ParquetWriter:
    """Writes row groups of exactly ``ROW_GROUP_ROWS`` records (the last may be shorter), so the
    output file's bytes do not depend on the chunk size the input was read with."""

    ROW_GROUP_ROWS = 65_536

    def __init__(self, handle, schema, input_columns: list):
        import pyarrow.parquet as pq

        self._schema = schema
        self._labels = [column_label(name, input_columns) for name in schema.names]
        self._writer = pq.ParquetWriter(handle, schema, **_PARQUET_LAYOUT)
        self._pending: list = []
        self._pending_rows = 0

    def write(self, frame: pd.DataFrame) -> None:
        import pyarrow as pa

        table = pa.Table.from_pandas(frame, schema=self._schema, preserve_index=False)
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows >= self.ROW_GROUP_ROWS:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        import pyarrow as pa

        if not self._pending:
            return
        table = pa.concat_tables(self._pending)
        full = (table.num_rows // self.ROW_GROUP_ROWS) * self.ROW_GROUP_ROWS
        cut = table.num_rows if final else full
        for start in range(0, cut, self.ROW_GROUP_ROWS):  # one row group at a time
            # One Arrow chunk a column: pyarrow's encoders (the dictionary page's size limit)
            # look at chunk edges, which follow the input's chunks, and the bytes must not.
            group = dictionaries_of_their_own(
                table.slice(start, min(self.ROW_GROUP_ROWS, cut - start)), self._labels
            ).combine_chunks()
            self._writer.write_table(group, row_group_size=self.ROW_GROUP_ROWS)
        rest = table.slice(cut)
        self._pending = [rest] if rest.num_rows else []
        self._pending_rows = rest.num_rows

    def close(self, columns: list) -> None:
        self._flush(final=True)
        self._writer.close()

    def abort(self) -> None:
        """Close without raising (the file is about to be removed)."""
        try:
            self._writer.close()
        except Exception:  # best effort: the file is about to be deleted
            pass


def written_with(name: str, schema: Any = None) -> dict[str, str]:
    """The libraries whose version can change the bytes of an output named ``name`` while its
    records stay the same, with their versions (the manifest records them; docs/release.md,
    "Byte for byte").  Only what shapes the bytes is named:

    * a Parquet output is laid out by pyarrow (its version is also written into the file);
    * in a CSV output, text cells are copied as they are and typed cells follow the package's
      own rules (``csv_text.py``), save one thing outside it: the local time of a timestamp in
      a named time zone (``Europe/London``) comes from the time-zone database, whose version is
      recorded when ``schema`` (a Parquet input's) has such a column;
    * a compressed CSV is compressed by Python's ``gzip``, ``bz2`` or ``lzma`` module over
      zlib, libbz2 or liblzma.  Python exposes zlib's version but not libbz2's or liblzma's,
      so Python's own version stands for those (the library it was built with, and the
      module's defaults: the container's header, the check).
    """
    if table_format(name) == "parquet":
        import pyarrow

        return {"pyarrow": pyarrow.__version__}
    versions = {}
    if schema is not None and (zones := named_time_zones(schema)):
        versions.update(tz_database(zones))
    lower = name.lower()
    if is_compressed(lower):
        versions["python"] = platform.python_version()
    if lower.endswith(".gz"):
        versions["zlib"] = zlib.ZLIB_RUNTIME_VERSION
    return versions


def uncompressed_sha256(path: str | os.PathLike, name: str) -> str | None:
    """SHA-256 of the CSV text of the compressed output at ``path`` that will be named
    ``name``: the same on every machine, whereas the compressed bytes depend on the compressor
    library.  ``None`` for an output that is not compressed CSV."""
    lower = name.lower()
    if table_format(name) != "csv" or lower.endswith(".csv"):
        return None
    with open_decompressed(os.fspath(path), name) as handle:
        return sha256_of_stream(handle)


def open_writer(handle, name: str, input_columns: list, schema=None):
    """A writer for the output format of ``name`` over the open binary ``handle``.

    ``input_columns`` are the input's columns, in order: a message names a column by its
    place there, the column the user sees in the file, not by its place in the output.
    ``schema`` (an Arrow schema) is required for Parquet.  Call ``write(frame)`` per chunk and
    ``close(columns)`` once, or ``abort()`` on failure; the caller closes ``handle``.
    """
    if table_format(name) == "csv":
        return _CsvWriter(handle, name, input_columns)
    return _ParquetWriter(handle, schema, input_columns)
