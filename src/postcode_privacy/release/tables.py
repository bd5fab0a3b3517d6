"""Reading records in chunks and writing released records incrementally (CSV and Parquet).

The format follows the file name: ``.csv`` (also ``.csv.gz``, ``.csv.bz2`` or ``.csv.xz``,
compressed on the fly) or ``.parquet``/``.pq``.  CSV is read as UTF-8 (a byte-order
mark is allowed) with every cell as text, exactly as written: nothing is converted to a number,
so identifiers keep their leading zeros and other columns come out as they went in.  Parquet
columns keep their Arrow types.  Neither reader holds more than one chunk in memory.

Problems with the file as a whole (empty, unreadable, not UTF-8, ragged rows, duplicate column
names) raise :class:`InputDataError` naming a line of the file or a column, never a cell value.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import lzma
import os
import re
import warnings
from collections.abc import Iterator

import pandas as pd

from ..errors import InputDataError, InvalidParameterError

__all__ = ["table_format", "TableReader", "open_writer"]

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
        ".xz), .parquet or .pq")


def _open_binary(path: str) -> io.BufferedIOBase:
    lower = path.lower()
    if lower.endswith(".gz"):
        return gzip.open(path, "rb")
    if lower.endswith(".bz2"):
        return bz2.open(path, "rb")
    if lower.endswith(".xz"):
        return lzma.open(path, "rb")
    return open(path, "rb")


def _first_bad_utf8_line(path: str) -> int | None:
    """1-based line of the file holding the first byte sequence that is not UTF-8."""
    with _open_binary(path) as handle:
        for number, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError:
                return number
    return None


class TableReader:
    """The header and the chunks of one input table.

    Construction reads only the header (and, for Parquet, the footer); :meth:`chunks` can be
    called more than once, each call reading the file again from the start.
    """

    def __init__(self, path: str | os.PathLike, chunk_size: int):
        self.path = os.fspath(path)
        self.format = table_format(self.path)
        self.chunk_size = int(chunk_size)
        self.num_rows: int | None = None
        self.arrow_schema = None
        if self.format == "csv":
            self.columns = self._csv_header()
        else:
            self.columns = self._parquet_header()
        if len(set(self.columns)) != len(self.columns):
            raise InputDataError(duplicate_columns_message(self.columns))

    # -- CSV --------------------------------------------------------------------------------------

    def _csv_header(self) -> list[str]:
        try:
            with _open_binary(self.path) as raw:
                if not raw.read(1):
                    raise InputDataError("the input file is empty")
            with _open_binary(self.path) as raw:
                text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
                for row in csv.reader(text):
                    if row:
                        return row
        except UnicodeDecodeError:
            raise InputDataError(self._encoding_message()) from None
        except csv.Error:
            raise InputDataError("the input's header line is not well-formed CSV") from None
        except (OSError, EOFError, lzma.LZMAError) as exc:
            raise InputDataError(f"cannot read the input file: {_os_reason(exc)}") from None
        raise InputDataError("the input file has no header line (it holds only blank lines)")

    def _encoding_message(self) -> str:
        try:
            line = _first_bad_utf8_line(self.path)
        except (OSError, EOFError):
            line = None
        where = f" (first invalid byte on line {line} of the file)" if line else ""
        return f"the input is not UTF-8 text{where}; re-save it as UTF-8"

    def _csv_chunks(self) -> Iterator[pd.DataFrame]:
        try:
            reader = pd.read_csv(
                self.path, sep=",", header=0, names=self.columns, index_col=False, dtype=str,
                keep_default_na=False, na_filter=False, chunksize=self.chunk_size,
                encoding="utf-8", compression="infer", skip_blank_lines=True, engine="c")
        except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError, OSError,
                ValueError) as exc:
            raise self._csv_error(exc) from None
        with reader:
            while True:
                try:
                    with warnings.catch_warnings():
                        # A first record longer than the header would silently become an index.
                        warnings.simplefilter("error", pd.errors.ParserWarning)
                        chunk = next(reader)
                except StopIteration:
                    return
                except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.ParserWarning,
                        OSError, EOFError, ValueError) as exc:
                    raise self._csv_error(exc) from None
                yield chunk

    def _csv_error(self, exc: BaseException) -> InputDataError:
        if isinstance(exc, UnicodeDecodeError):
            return InputDataError(self._encoding_message())
        if isinstance(exc, pd.errors.ParserWarning):
            return InputDataError("the first record has more fields than the header")
        if isinstance(exc, pd.errors.EmptyDataError):
            return InputDataError("the input file is empty")
        message = str(exc)
        more = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", message)
        if more:
            return InputDataError(f"line {more.group(2)} of the file has {more.group(3)} fields; "
                                  f"the header has {more.group(1)}")
        if isinstance(exc, pd.errors.ParserError):
            line = re.search(r"(?:line|row) (\d+)", message)
            where = f" (near line {line.group(1)} of the file)" if line else ""
            return InputDataError(f"the input is not well-formed CSV{where}")
        if isinstance(exc, OSError | EOFError):
            return InputDataError(f"cannot read the input file: {_os_reason(exc)}")
        return InputDataError("the input is not well-formed CSV")

    # -- Parquet ----------------------------------------------------------------------------------

    def _parquet_file(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        if os.path.getsize(self.path) == 0:
            raise InputDataError("the input file is empty")
        try:
            return pq.ParquetFile(self.path)
        except (pa.ArrowException, OSError, ValueError):
            raise InputDataError("the input is not a readable Parquet file") from None

    def _parquet_header(self) -> list[str]:
        handle = self._parquet_file()
        try:
            self.arrow_schema = handle.schema_arrow
            self.num_rows = int(handle.metadata.num_rows)
        finally:
            handle.close()
        return list(self.arrow_schema.names)

    def _parquet_chunks(self) -> Iterator[pd.DataFrame]:
        import pyarrow as pa

        handle = self._parquet_file()
        try:
            batches = handle.iter_batches(batch_size=self.chunk_size, use_pandas_metadata=False)
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                except (pa.ArrowException, OSError, ValueError):
                    raise InputDataError("the input Parquet file is damaged or truncated") from None
                yield batch.to_pandas(types_mapper=pd.ArrowDtype)
        finally:
            handle.close()

    def chunks(self) -> Iterator[pd.DataFrame]:
        """DataFrames of at most ``chunk_size`` records each, in file order."""
        if self.format == "csv":
            return self._csv_chunks()
        return self._parquet_chunks()

    def output_schema(self, columns: list, out_column: str):
        """The Arrow schema of the output table (for Parquet output)."""
        import pyarrow as pa

        fields = []
        for name in columns:
            if name == out_column:
                fields.append(pa.field(name, pa.string()))
            elif self.arrow_schema is not None:
                fields.append(self.arrow_schema.field(name))
            else:
                fields.append(pa.field(name, pa.string()))
        return pa.schema(fields)


def duplicate_columns_message(columns: list) -> str:
    """Name duplicated columns by position: a file without a header line would otherwise have
    its first record (identifiers, postcodes) echoed as "column names"."""
    first: dict = {}
    pairs = []
    for position, name in enumerate(columns, start=1):
        if name in first:
            pairs.append(f"{first[name]} and {position}")
        else:
            first[name] = position
    return ("the input has duplicate column names (columns " + "; ".join(pairs) + "); "
            "does the file start with a header line?")


def _os_reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


class _CsvWriter:
    """Writes chunks as CSV text (gzip without a timestamp, so outputs are byte-identical)."""

    def __init__(self, handle, name: str):
        lower = name.lower()
        self._inner = None
        if lower.endswith(".gz"):
            self._inner = gzip.GzipFile(filename="", mode="wb", fileobj=handle, mtime=0)
            raw = self._inner
        elif lower.endswith(".bz2"):
            self._inner = bz2.BZ2File(handle, "wb")
            raw = self._inner
        elif lower.endswith(".xz"):
            self._inner = lzma.LZMAFile(handle, "wb")
            raw = self._inner
        else:
            raw = handle
        self._text = io.TextIOWrapper(raw, encoding="utf-8", newline="", write_through=False)
        self._header_written = False

    def write(self, frame: pd.DataFrame) -> None:
        frame.to_csv(self._text, index=False, header=not self._header_written, lineterminator="\n")
        self._header_written = True

    def close(self, columns: list) -> None:
        if not self._header_written:
            pd.DataFrame(columns=columns).to_csv(self._text, index=False, lineterminator="\n")
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


class _ParquetWriter:
    """Writes row groups of exactly ``ROW_GROUP_ROWS`` records (the last may be shorter), so the
    output file's bytes do not depend on the chunk size the input was read with."""

    ROW_GROUP_ROWS = 65_536

    def __init__(self, handle, schema):
        import pyarrow.parquet as pq

        self._schema = schema
        self._writer = pq.ParquetWriter(handle, schema)
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
        if cut:
            self._writer.write_table(table.slice(0, cut), row_group_size=self.ROW_GROUP_ROWS)
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


def open_writer(handle, name: str, schema=None):
    """A writer for the output format of ``name`` over the open binary ``handle``.

    ``schema`` (an Arrow schema) is required for Parquet.  Call ``write(frame)`` per chunk and
    ``close(columns)`` once, or ``abort()`` on failure; the caller closes ``handle``.
    """
    if table_format(name) == "csv":
        return _CsvWriter(handle, name)
    return _ParquetWriter(handle, schema)
