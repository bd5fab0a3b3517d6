"""Reading records in chunks and writing released records incrementally (CSV and Parquet).

The format follows the file name: ``.csv`` (also ``.csv.gz``, ``.csv.bz2`` or ``.csv.xz``,
compressed on the fly) or ``.parquet``/``.pq``.  CSV is read as UTF-8 (a byte-order
mark is allowed) with every cell as text, exactly as written: nothing is converted to a number,
so identifiers keep their leading zeros and other columns come out as they went in.  Parquet
columns keep their Arrow types.  Neither reader holds more than one chunk in memory.

Problems with the file as a whole (empty, unreadable, damaged or truncated compression, not
UTF-8, ragged rows, duplicate column names, more than :data:`MAX_COLUMNS` columns or a header
line above :data:`MAX_HEADER_CHARS` characters) raise :class:`InputDataError` naming a line of
the file, a record or a column, never a cell value.

Parquet files written by pandas carry "pandas metadata" that turns some columns back into an
index.  It is ignored on reading and not written: every column the file stores (an index stored
as ``__index_level_0__`` included) is an ordinary column of the release (docs/release.md); it is
read only to name a column asked for that is a RangeIndex, which pandas does not store.

Writers round-trip: reading a CSV release back with ``pandas.read_csv(..., dtype=str,
keep_default_na=False)`` gives every cell exactly as it went in, carriage returns included; a
Parquet input's typed cells are written by the rules of ``csv_text.py``, whose text reads back
as the same values.
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import csv
import gzip
import io
import lzma
import os
import platform
import re
import sys
import warnings
import zlib
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO, NamedTuple

import pandas as pd

from .._digest import sha256_of_stream
from ..atomic import refuse_directory_path
from ..errors import InputDataError, InvalidParameterError
from .csv_text import (
    Unshowable,
    first_unshowable,
    has_text,
    named_time_zones,
    series_text,
    tz_database_version,
)
from .type_words import type_words

__all__ = [
    "table_format",
    "TableReader",
    "open_writer",
    "written_with",
    "uncompressed_sha256",
    "read_failure",
    "first_invalid_record",
    "MAX_COLUMNS",
    "MAX_HEADER_CHARS",
]

# Bounds on the shape of an input (docs/release.md, "Limits and unusual files"): far above
# real record files, low enough that a hostile header fails in a second, not out of memory.
MAX_COLUMNS = 10_000
MAX_HEADER_CHARS = 1_000_000
# Records per chunk are lowered for wide files so that a chunk holds at most this many cells
# (the output does not depend on the chunk size).
MAX_CELLS_PER_CHUNK = 2_000_000
# What reading a (possibly compressed) file can raise besides a decoding error.
_READ_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)

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


def _open_binary(
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


def _first_bad_utf8_line(path: str) -> int | None:
    """1-based line of the file holding the first byte sequence that is not UTF-8, counting
    lines as the CSV readers do: LF, CR and CRLF each end one."""
    number = 1  # the line the next piece starts on
    with _open_binary(path) as handle:
        for first, piece in enumerate(handle):  # pieces end at each LF
            skip = 3 if first == 0 and piece.startswith(codecs.BOM_UTF8) else 0
            try:
                piece[skip:].decode("utf-8")
            except UnicodeDecodeError as exc:
                return number + piece[: skip + exc.start].count(b"\r")
            lone_crs = piece.count(b"\r") - piece.endswith(b"\r\n")
            number += lone_crs + piece.endswith(b"\n")
    return None


class TableReader:
    """The header and the chunks of one input table.

    Construction reads only the header (and, for Parquet, the footer); :meth:`chunks` can be
    called more than once, each call reading the file again from the start.
    """

    def __init__(self, path: str | os.PathLike, chunk_size: int):
        refuse_directory_path(path, "input", InputDataError)  # "in.csv/" is not "in.csv"
        self.path = os.fspath(path)
        self.format = table_format(self.path)
        self.chunk_size = int(chunk_size)
        self.num_rows: int | None = None
        self.arrow_schema: Any = None  # pyarrow.Schema of a Parquet input (pyarrow has no types)
        # The schema a Parquet input's chunks are given to pandas in (``_without_views``).
        self._pandas_schema: Any = None
        # Columns whose every value must have CSV text (``refuse_values_csv_cannot_show``).
        self._csv_columns: set = set()
        # Names of pandas RangeIndexes a Parquet input records only in its pandas metadata.
        self.metadata_indexes: list[str] = []
        # whether pandas may skip empty lines, once the lines are checked (``_check_lines``)
        self._skip_blank_lines: bool | None = None
        if self.format == "csv":
            self.columns = self._csv_header()
        else:
            self.columns = self._parquet_header()
        if len(set(self.columns)) != len(self.columns):
            raise InputDataError(
                duplicate_columns_message(self.columns, header_line=self.format == "csv")
            )

    # -- CSV --------------------------------------------------------------------------------------

    def _csv_header(self) -> list[str]:
        try:
            with _open_binary(self.path) as raw:
                start = raw.read(len(codecs.BOM_UTF8))
                if not start:
                    raise InputDataError("the input file is empty")
                if start == codecs.BOM_UTF8 and not raw.read(1):
                    raise InputDataError(
                        "the input file is empty (it holds only a byte-order mark)"
                    )
            with _open_binary(self.path) as raw, _csv_field_limit(MAX_HEADER_CHARS):
                text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
                lines = _HeaderLines(text)
                reader = csv.reader(lines)
                for row in reader:
                    if _blanks_only(row):
                        raise InputDataError(_blank_line_message(reader.line_num))
                    if row:
                        return _bounded_columns(row)
                    lines.next_record()  # an empty line before the header
        except UnicodeDecodeError:
            raise InputDataError(self._encoding_message()) from None
        except csv.Error:
            raise InputDataError("the input's header line is not well-formed CSV") from None
        except _READ_ERRORS as exc:
            raise InputDataError(read_failure(self.path, exc)) from None
        raise InputDataError("the input file has no header line (it holds only blank lines)")

    def _encoding_message(self) -> str:
        try:
            line = _first_bad_utf8_line(self.path)
        except _READ_ERRORS:
            line = None
        where = f" (first invalid byte on line {line} of the file)" if line else ""
        return f"the input is not UTF-8 text{where}; re-save it as UTF-8"

    @property
    def rows_per_chunk(self) -> int:
        """``chunk_size``, lowered for wide files to keep a chunk's cell count bounded."""
        return max(1, min(self.chunk_size, MAX_CELLS_PER_CHUNK // max(1, len(self.columns))))

    def _csv_chunks(self) -> Iterator[pd.DataFrame]:
        if self._skip_blank_lines is None:
            self._skip_blank_lines = self._check_lines()
        try:
            reader = pd.read_csv(
                self.path,
                sep=",",
                header=0,
                names=self.columns,
                index_col=False,
                dtype=str,
                keep_default_na=False,
                na_filter=False,
                chunksize=self.rows_per_chunk,
                encoding="utf-8",
                compression="infer",
                skip_blank_lines=self._skip_blank_lines,
                engine="c",
            )
        except (
            UnicodeDecodeError,
            pd.errors.ParserError,
            pd.errors.EmptyDataError,
            ValueError,
            *_READ_ERRORS,
        ) as exc:
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
                except (
                    UnicodeDecodeError,
                    pd.errors.ParserError,
                    pd.errors.ParserWarning,
                    ValueError,
                    *_READ_ERRORS,
                ) as exc:
                    raise self._csv_error(exc) from None
                yield chunk

    def _check_lines(self) -> bool:
        """Refuse the lines pandas would misread, before any record is read; return whether
        its reader may skip empty lines (``skip_blank_lines``).

        pandas' search for blank lines has three faults: it skips a line of nothing but
        spaces or tabs like an empty one (a record vanishes); it loses the blanks a record
        starts with when they straddle the end of its 256 KiB read buffer; and after an empty
        line ended by a lone carriage return it drops the next record's leading comma (every
        cell moves one column left).  So: a line of blanks is refused, naming it; a file with
        no empty line is read without the search (the same records, none of its faults); one
        with empty lines is read with it unless a fault could strike, and refused, naming
        its first empty line, where one could."""
        try:
            survey = _survey_lines(self.path)
            if not (survey.could_start_blank or survey.could_be_empty):
                return False
            lines = _blank_and_empty_lines(self.path)
        except (csv.Error, UnicodeDecodeError, *_READ_ERRORS):
            return True  # the reading pass reports what is wrong with the file
        if lines.blank is not None:
            raise InputDataError(_blank_line_message(lines.blank))
        if lines.empty is None:
            return False
        buffer_fault = lines.starts_blank and survey.size > _PANDAS_BUFFER
        carriage_fault = survey.lone_cr and lines.empty_before_record
        if not (buffer_fault or carriage_fault):
            return True
        why = "records start with spaces or tabs" if buffer_fault else "lines end in a lone CR"
        raise InputDataError(
            f"line {lines.empty} of the file is empty, and the CSV reader cannot skip empty "
            f"lines safely in this file ({why}): remove the empty lines"
        )

    def _csv_error(self, exc: BaseException) -> InputDataError:
        if isinstance(exc, UnicodeDecodeError):
            return InputDataError(self._encoding_message())
        if isinstance(exc, pd.errors.ParserWarning):
            return InputDataError("the first record has more fields than the header")
        if isinstance(exc, pd.errors.EmptyDataError):
            return InputDataError("the input file is empty")
        if isinstance(exc, _READ_ERRORS):
            return InputDataError(read_failure(self.path, exc))
        message = str(exc)
        more = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", message)
        if more:
            # pandas counts records, not lines: find the line in the file ourselves, since a
            # quoted cell may hold line breaks.
            found = _first_long_record(self.path, len(self.columns))
            if found is not None:
                record, line, fields = found
                return InputDataError(
                    f"record {record} (starting on line {line} of the file) has {fields} "
                    f"fields; the header has {len(self.columns)}"
                )
            return InputDataError(
                f"record {int(more.group(2)) - 1} has {more.group(3)} fields; "
                f"the header has {more.group(1)}"
            )
        if isinstance(exc, pd.errors.ParserError):
            opened = _unclosed_quote_line(self.path)
            if opened is not None:
                return InputDataError(
                    f"the input is not well-formed CSV: the record starting on line {opened} "
                    "of the file has a quoted cell that is never closed"
                )
            return InputDataError(
                "the input is not well-formed CSV (an unclosed quote, or a "
                "cell larger than the reader allows)"
            )
        return InputDataError("the input is not well-formed CSV")

    # -- Parquet ----------------------------------------------------------------------------------

    def _parquet_file(self):
        import pyarrow as pa
        import pyarrow.parquet as pq

        if os.path.getsize(self.path) == 0:
            raise InputDataError("the input file is empty")
        try:
            # INT96 timestamps (Spark's and Hive's older format) are read in microseconds:
            # in nanoseconds, pyarrow's default, a date past 2262 or before 1677 (9999-12-31,
            # a common "valid to") wraps round silently.
            return pq.ParquetFile(self.path, coerce_int96_timestamp_unit="us")
        except (pa.ArrowException, OSError, ValueError):
            raise InputDataError("the input is not a readable Parquet file") from None

    def _parquet_header(self) -> list[str]:
        import pyarrow as pa

        handle = self._parquet_file()
        try:
            if handle.metadata.num_columns > MAX_COLUMNS:
                raise InputDataError(_too_many_columns(handle.metadata.num_columns))
            # pandas metadata would turn stored columns into an index: every stored column is
            # an ordinary column here (module docstring).
            self.metadata_indexes = _range_index_names(handle.schema_arrow.metadata)
            schema = handle.schema_arrow.remove_metadata()
            _refuse_dictionaries_in_extensions(schema)
            self.num_rows = int(handle.metadata.num_rows)
        finally:
            handle.close()
        self.arrow_schema = schema
        self._pandas_schema = pa.schema([f.with_type(_without_views(f.type)) for f in schema])
        return _bounded_columns(list(schema.names))

    def _parquet_chunks(self) -> Iterator[pd.DataFrame]:
        import pyarrow as pa

        handle = self._parquet_file()
        offset = 0
        try:
            batches = handle.iter_batches(batch_size=self.rows_per_chunk, use_pandas_metadata=False)
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                except (pa.ArrowException, OSError, ValueError):
                    raise InputDataError("the input Parquet file is damaged or truncated") from None
                batch = batch.replace_schema_metadata(None)
                _check_utf8(batch, offset)
                _check_csv_text(batch, offset, self._csv_columns)
                if batch.schema != self._pandas_schema:
                    batch = pa.RecordBatch.from_arrays(
                        [c.cast(t) for c, t in zip(batch.columns, self._pandas_schema.types)],
                        schema=self._pandas_schema,
                    )
                offset += batch.num_rows
                yield batch.to_pandas(types_mapper=pd.ArrowDtype)
        finally:
            handle.close()

    def check_columns(self, options) -> None:
        """Refuse an input whose columns cannot be released with ``options`` (a
        :class:`~postcode_privacy.release.options.ReleaseOptions`): its ``check_columns``, after
        naming a wanted column that a Parquet file holds only as a pandas RangeIndex."""
        for name in (options.id_column, options.postcode_column):
            if name not in self.columns and name in self.metadata_indexes:
                raise InputDataError(
                    f"the input has no column {name!r}: in this Parquet file {name!r} is a "
                    "pandas index of consecutive numbers (a RangeIndex), kept only in the "
                    "file's pandas metadata, not stored as a column; write the file with it "
                    "as a column (df.reset_index().to_parquet(...), or to_parquet(..., "
                    "index=True)) and release that file"
                )
        options.check_columns(self.columns, header_line=self.format == "csv")

    def refuse_values_csv_cannot_show(self, columns: list) -> None:
        """For a CSV output: refuse, chunk by chunk as they are read (in the check pass, before
        anything is drawn), a value of ``columns`` that has no CSV text (a date or timestamp
        outside years 1 to 9999; ``csv_text.first_unshowable``), naming its record and
        column.  CSV inputs hold only text, which always has."""
        self._csv_columns = set(columns)

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


def refuse_columns_csv_cannot_hold(schema, columns: list) -> None:
    """For a Parquet input released to CSV: refuse, before any work, a kept column whose values
    have no CSV text that reads back unchanged (``csv_text.has_text``: binary values, lists,
    structs, maps, unions, or timestamps in a time zone Python does not know), naming the
    column, never a value."""
    import pyarrow as pa

    if schema is None:
        return
    for position, name in enumerate(schema.names, start=1):
        kind = schema.field(name).type
        if name in columns and not has_text(kind):
            what = type_words(kind)
            if pa.types.is_timestamp(kind):  # the only scalar type without text
                what = "timestamps in a time zone Python does not know"
            raise InvalidParameterError(
                f"column {position} holds {what}, which a CSV cell cannot "
                "hold unchanged: write the release as Parquet (an output name ending .parquet) "
                "to keep them"
            )


def column_label(name, columns) -> str:
    """How a message names the column ``name``: by its 1-based place among the input's
    ``columns`` (the column the user sees in the file, wherever the output puts it) only.
    Its header name is not echoed: a CSV file without a header line has its first record
    taken for the header, so a name may be a cell value.  A name the input lacks (the
    released column, named by the caller's own option) is named alone."""
    position = next((i for i, c in enumerate(columns, start=1) if c == name), None)
    if position is None:
        return f"column {name!r}"
    return f"column {position}"


def duplicate_columns_message(columns: list, *, header_line: bool = True) -> str:
    """Name duplicated columns by position: a file without a header line would otherwise have
    its first record (identifiers, postcodes) echoed as "column names".  ``header_line``: the
    input is a CSV file, which may lack one."""
    first: dict = {}
    pairs = []
    for position, name in enumerate(columns, start=1):
        if name in first:
            pairs.append(f"{first[name]} and {position}")
        else:
            first[name] = position
    hint = "; does the file start with a header line?" if header_line else ""
    return "the input has duplicate column names (columns " + "; ".join(pairs) + ")" + hint


class _HeaderLines:
    """Lines of ``text`` for the header's CSV reader, refusing a header of more than
    MAX_HEADER_CHARS characters before reading more of it than that.

    What counts is the header's own text: the line break that ends it is not part of it (nor
    is a byte-order mark, which the decoder drops), while a line break inside a quoted name
    is.  Empty lines before the header are not the header: :meth:`next_record` starts the
    count again after each one."""

    # Read at most this many characters past the limit: room for the longest line break, CRLF.
    _BREAK = 2

    def __init__(self, text):
        self._text = text
        self._chars = 0  # characters of the record being read so far, line breaks included

    def next_record(self) -> None:
        self._chars = 0

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        line = self._text.readline(MAX_HEADER_CHARS + self._BREAK - self._chars)
        if not line:
            raise StopIteration
        self._chars += len(line)
        ending = 2 if line.endswith("\r\n") else 1 if line.endswith(("\r", "\n")) else 0
        if self._chars - ending > MAX_HEADER_CHARS:
            raise InputDataError(
                f"the input's header line is longer than {MAX_HEADER_CHARS:,} "
                "characters; this is not a record file the release can read"
            )
        return line


def _too_many_columns(count: int) -> str:
    return (
        f"the input has {count:,} columns; at most {MAX_COLUMNS:,} are supported "
        "(drop the columns the release does not need)"
    )


def _bounded_columns(columns: list) -> list:
    if len(columns) > MAX_COLUMNS:
        raise InputDataError(_too_many_columns(len(columns)))
    return columns


def read_failure(path: str, exc: BaseException) -> str:
    """The message for an input that could not be read (in the CLI's terms, no path echoed)."""
    if path.lower().endswith((".gz", ".bz2", ".xz")) and not isinstance(
        exc, FileNotFoundError | PermissionError
    ):
        return "the compressed input is damaged or ends early (truncated?)"
    if isinstance(exc, FileNotFoundError):  # worded as release_file's own check words it
        return "the input file does not exist"
    return f"cannot read the input file: {_os_reason(exc)}"


@contextlib.contextmanager
def _csv_field_limit(at_least: int) -> Iterator[None]:
    """Python's CSV reader refuses fields over 131,072 characters by default, below the header
    bound; raise its (process-wide) limit for the block, then put it back."""
    previous = csv.field_size_limit()
    csv.field_size_limit(max(previous, at_least + 1))
    try:
        yield
    finally:
        csv.field_size_limit(previous)


# A line may hold only spaces or tabs only if some line starts with one: after a line break
# (LF, CR or CRLF) or at the start of the file.  Four byte searches rule most files out.
_LINE_STARTS_BLANK = (b"\n ", b"\n\t", b"\r ", b"\r\t")
# An empty line: two line breaks in a row (LF LF, CR CR, or a CRLF's LF before a CR).
_EMPTY_LINE = (b"\n\n", b"\r\r", b"\n\r")
_SCAN_BLOCK = 1 << 22


def _blanks_only(row: list[str]) -> bool:
    """Whether a CSV row is one field of nothing but spaces or tabs (a line of blanks, unless
    the field was quoted)."""
    return len(row) == 1 and bool(row[0]) and not row[0].strip(" \t")


def _blank_line_message(line: int) -> str:
    return (
        f"line {line} of the file holds only spaces or tabs: it is neither a record nor an "
        "empty line; remove it, or write its fields"
    )


class _Survey(NamedTuple):
    could_start_blank: bool  # some line starts with a space or a tab
    could_be_empty: bool  # some line is empty
    lone_cr: bool  # some carriage return is not followed by a line feed
    size: int  # bytes (after decompression)


# The end of pandas' C reader's read buffer (its default chunk): where a line's leading blanks
# can straddle it, its blank-line search loses them.
_PANDAS_BUFFER = 262_144


def _survey_lines(path: str) -> _Survey:
    """What the raw bytes say the lines could hold, by byte searches (fast); lines inside
    quoted cells count too, so a True here is only a "could"."""
    start_blank = empty = lone_cr = False
    size = 0
    with _open_binary(path) as raw:
        tail = b"\n"  # as if a line break came before the file: its first line starts here
        first = True
        while block := raw.read(_SCAN_BLOCK):
            if first:
                block = block.removeprefix(b"\xef\xbb\xbf")
                first = False
            size += len(block)
            for data in (tail + block[:1], block):  # the pair across the blocks' edge, then all
                start_blank = start_blank or any(mark in data for mark in _LINE_STARTS_BLANK)
                empty = empty or any(mark in data for mark in _EMPTY_LINE)
            if not lone_cr and (tail == b"\r" or b"\r" in block):  # most files have no CR
                # a CR at the very end waits for the next block to say what follows it
                data = tail + block
                lone_cr = data[:-1].count(b"\r") != data.count(b"\r\n")
            tail = block[-1:]
        lone_cr = lone_cr or tail == b"\r"
    return _Survey(start_blank, empty, lone_cr, size)


def _records_with_lines(path: str) -> Iterator[tuple[int, list[str], str, bool]]:
    """(line of the file the record starts on, its fields, the raw text of that line, whether
    the record is that one line) for every record by Python's CSV reader, which splits lines
    and quotes as pandas does (a quote inside an unquoted field is text; LF, CR and CRLF all
    end a line)."""
    with _open_binary(path) as raw, _csv_field_limit(sys.maxsize // 2):
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        last: list[str] = []

        def lines() -> Iterator[str]:
            for line in text:
                last.append(line)
                yield line

        reader = csv.reader(lines())
        while True:
            start = reader.line_num + 1
            last.clear()
            try:
                row = next(reader)
            except StopIteration:
                return
            yield start, row, last[0] if last else "", len(last) == 1


def record_lines(path: str | os.PathLike, records: Iterable[int], total: int) -> dict[int, int]:
    """The line of the CSV file ``path`` on which each of ``records`` (numbered from 1, as
    messages number them: the header is not a record) starts, counting the header as line 1.
    Read again from the start, only when records are to be listed in an error: a record may
    span lines (a quoted newline), and empty lines, which pandas skips, are not records.

    Nothing (an empty dict) unless this reading finds ``total`` records, as many as the
    release's reader did: where the two readers split a file differently a line could be
    wrong, and no line is better than a wrong one."""
    wanted = set(records)
    found: dict[int, int] = {}
    if not wanted:
        return found
    number = -1  # the header is record 0
    try:
        for line, fields, _, _ in _records_with_lines(str(path)):
            if not fields:  # an empty line
                continue
            number += 1
            if number in wanted:
                found[number] = line
    except (*_READ_ERRORS, ValueError, csv.Error):  # (changed or unreadable since: no lines)
        return {}
    return found if number == total else {}


class _Lines(NamedTuple):
    blank: int | None  # the first line of nothing but spaces or tabs
    empty: int | None  # the first empty line
    empty_before_record: bool  # some empty line has a record after it
    starts_blank: bool  # some record starts with a space or a tab


def _blank_and_empty_lines(path: str) -> _Lines:
    """What the lines outside quoted cells hold, by Python's CSV reader (which splits lines
    and quotes as pandas does)."""
    empty = None
    pending_empty = before_record = starts_blank = False
    for line, row, raw, one_line in _records_with_lines(path):
        if not row:
            empty = line if empty is None else empty
            pending_empty = True
            continue
        if one_line and _blanks_only(row):
            if raw.rstrip("\r\n") == row[0]:  # unquoted: the line itself is the blanks
                return _Lines(line, empty, before_record, True)
        before_record = before_record or pending_empty
        starts_blank = starts_blank or raw[:1] in (" ", "\t")
    return _Lines(None, empty, before_record, starts_blank)


def _unclosed_quote_line(path: str) -> int | None:
    """The line on which the record holding a never-closed quoted cell starts, or None: Python's
    CSV reader, like pandas, runs such a cell to the end of the file, so it is the last record,
    and it holds a quote."""
    last = None
    try:
        for line, row, _, _ in _records_with_lines(path):
            last = (line, row)
    except (csv.Error, UnicodeDecodeError, *_READ_ERRORS):
        return None
    if last is None or not any('"' in cell or "\n" in cell or "\r" in cell for cell in last[1]):
        return None
    return last[0]


def _first_long_record(path: str, width: int) -> tuple[int, int, int] | None:
    """(record number, line of the file it starts on, fields) of the first record with more
    than ``width`` fields, by Python's CSV reader, which counts the lines inside quoted cells."""
    try:
        record = -1  # the header is not a record
        for start, row, _, _ in _records_with_lines(path):
            if row:
                record += 1
                if record > 0 and len(row) > width:
                    return record, start, len(row)
    except (csv.Error, UnicodeDecodeError, *_READ_ERRORS):
        return None
    return None


def _check_utf8(batch, offset: int) -> None:
    """Refuse text that is not valid UTF-8, naming the record and column (never the value)."""
    import pyarrow as pa

    try:
        batch.validate(full=True)
        return
    except pa.ArrowInvalid:
        pass
    for position in range(batch.num_columns):
        column = batch.column(position)
        row = first_invalid_record(column)
        if row is None:
            continue
        if pa.types.is_dictionary(column.type) and _is_text(column.type.value_type):
            # The bad text is in the column's dictionary, shared by many records.
            raise InputDataError(
                f"column {position + 1}, from record {offset + 1} on, holds "
                "dictionary-encoded text that is not valid UTF-8"
            )
        what = (
            "text that is not valid UTF-8"
            if _is_text(column.type)
            else f"a value that is not valid for its type ({type_words(column.type)})"
        )
        raise InputDataError(f"record {offset + row + 1}, column {position + 1} holds {what}")
    raise InputDataError("the input Parquet file holds invalid data")


def first_invalid_record(column) -> int | None:
    """The 0-based position of the first value of an Arrow array (or chunked array) that is not
    valid for its type, text that is not UTF-8 above all, or None if every one is valid.
    Arrow's own message is never used: it can quote the bytes."""
    import pyarrow as pa

    try:
        column.validate(full=True)
        return None
    except pa.ArrowInvalid:
        pass
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    start = 0
    for chunk in chunks:
        for row in range(len(chunk)):
            try:
                chunk.slice(row, 1).validate(full=True)
            except pa.ArrowInvalid:
                return start + row
        start += len(chunk)
    return None


def _range_index_names(metadata) -> list[str]:
    """The names of the RangeIndexes recorded in a Parquet file's pandas metadata (pandas
    stores no column for one), for an error message only; [] if there are none or the
    metadata cannot be read."""
    import json

    try:
        indexes = json.loads((metadata or {})[b"pandas"])["index_columns"]
        return [
            index["name"]
            for index in indexes
            if isinstance(index, dict)
            and index.get("kind") == "range"
            and isinstance(index.get("name"), str)
        ]
    except (KeyError, TypeError, ValueError, RecursionError):
        return []


def _check_csv_text(batch, offset: int, columns: set) -> None:
    """Refuse a value of ``columns`` with no CSV text, naming the record and column (never
    the value)."""
    for position, name in enumerate(batch.schema.names):
        if name in columns:
            found = first_unshowable(batch.column(position))
            if found is not None:
                raise InputDataError(
                    f"record {offset + found.row + 1}, column {position + 1} holds "
                    f"{found.why}, which CSV output cannot show; release to a .parquet output "
                    "instead, which keeps it"
                )


def _is_text(kind) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind)) or (
        getattr(pa.types, "is_string_view", lambda _: False)(kind)
    )


def _os_reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


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
        self._text.write(_csv_rows([[str(name)] for name in columns]))
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
            group = _dictionaries_of_their_own(
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


def _refuse_dictionaries_in_extensions(schema) -> None:
    """Refuse, by position and before any row is read, a Parquet column whose extension type
    is stored dictionary-encoded (:func:`dictionary_in_extension`)."""
    for position, field in enumerate(schema, start=1):
        if dictionary_in_extension(field.type):
            raise InputDataError(
                f"column {position} has an Arrow extension type stored dictionary-encoded, "
                "which cannot be read safely (pyarrow aborts) nor its dictionary rewritten; "
                "store its plain values and release again"
            )


def _dictionaries_of_their_own(table, labels: list[str]):
    """``table`` (one row group) with every dictionary, top-level or nested in a struct, list
    or map, encoded afresh from the values of these rows: a dictionary read from the input
    holds every value of the input's column, the dropped records' (``--on-error drop``) among
    them, and Arrow writes it into the Parquet file whole.  The column's Arrow type is kept.
    An unordered dictionary, and an ordered one nested in another type, lists its values in
    order of first appearance; an ordered one at the top level keeps the input's order, less
    the values these rows do not hold.  Either way it depends
    only on the rows written, so the file's bytes do not depend on the chunk size.
    ``labels[i]`` names the table's i-th column in a message (:func:`column_label`)."""
    import pyarrow as pa

    columns = []
    for position, column in enumerate(table.columns):
        kind = column.type
        plain = _without_dictionaries(kind)
        if plain != kind:
            try:  # (Arrow cannot cast a list view of dictionaries: refused, never leaked)
                values = column.cast(plain).combine_chunks()
                # take() compacts: a slice of a nested array still holds its parent's children
                values = values.take(pa.array(range(len(values)), pa.int64()))
                column = (
                    _ordered_afresh(column, values)
                    if pa.types.is_dictionary(kind) and kind.ordered
                    else values.cast(kind)
                )
            except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # e.g. an index type too
                # small for the values of several input row groups together
                raise InputDataError(
                    f"{labels[position]} is dictionary-encoded in a way this release cannot rewrite; decode it "
                    "(store its plain values) and release again"
                ) from None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema)


def _without_dictionaries(kind):
    """``kind`` with every dictionary type in it replaced by its value type."""
    import pyarrow as pa

    return _replaced_within(kind, lambda k: k.value_type if pa.types.is_dictionary(k) else k)


def _without_run_ends(kind):
    """``kind`` with every run-end-encoded type in it replaced by its value type."""
    import pyarrow as pa

    is_run_end_encoded = getattr(pa.types, "is_run_end_encoded", lambda _: False)
    return _replaced_within(kind, lambda k: k.value_type if is_run_end_encoded(k) else k)


def _without_views(kind):
    """``kind`` with every text or binary view type in it replaced by its large (64-bit
    offsets) form: pandas cannot take or filter rows of a view column (``--on-error drop``,
    the CSV writer), and the Parquet writer turns them back into the input's type."""
    import pyarrow as pa

    views = {"string_view": pa.large_string(), "binary_view": pa.large_binary()}
    return _replaced_within(kind, lambda k: views.get(str(k), k))


def _without_list_views(kind):
    """``kind`` with every list view in it replaced by the list of the same items: rows taken
    from a list view share its child values, so a left-out row's items would stay in them."""
    import pyarrow as pa

    def as_list(k):
        if getattr(pa.types, "is_list_view", lambda _: False)(k):
            return pa.list_(k.value_field)
        if getattr(pa.types, "is_large_list_view", lambda _: False)(k):
            return pa.large_list(k.value_field)
        return k

    return _replaced_within(kind, as_list)


def _replaced_within(kind, replace):
    """``kind`` with ``replace`` applied to it and to every type nested in it (struct fields,
    list, map and list-view items, union members, run-end-encoded values)."""
    import pyarrow as pa

    types = pa.types
    kind = replace(kind)

    def inner(field):
        return field.with_type(_replaced_within(field.type, replace))

    if types.is_struct(kind):
        return pa.struct([inner(f) for f in kind])
    if types.is_map(kind):
        return pa.map_(inner(kind.key_field), inner(kind.item_field), kind.keys_sorted)
    if types.is_large_list(kind):
        return pa.large_list(inner(kind.value_field))
    if types.is_fixed_size_list(kind):
        return pa.list_(inner(kind.value_field), kind.list_size)
    if types.is_list(kind):
        return pa.list_(inner(kind.value_field))
    if getattr(types, "is_list_view", lambda _: False)(kind):
        return pa.list_view(inner(kind.value_field))
    if getattr(types, "is_large_list_view", lambda _: False)(kind):
        return pa.large_list_view(inner(kind.value_field))
    if types.is_union(kind):
        return pa.union([inner(f) for f in kind], kind.mode, kind.type_codes)
    if getattr(types, "is_run_end_encoded", lambda _: False)(kind):
        return pa.run_end_encoded(kind.run_end_type, _replaced_within(kind.value_type, replace))
    return kind


def _types_within(kind):
    """``kind`` and every type nested in it, an extension type's storage included (which
    ``_replaced_within`` cannot rebuild, and so does not enter)."""
    import pyarrow as pa

    yield kind
    if isinstance(kind, pa.BaseExtensionType):
        yield from _types_within(kind.storage_type)
    elif pa.types.is_dictionary(kind):
        yield from _types_within(kind.value_type)
    elif getattr(pa.types, "is_run_end_encoded", lambda _: False)(kind):
        yield from _types_within(kind.value_type)
    elif pa.types.is_map(kind):
        yield from _types_within(kind.key_type)
        yield from _types_within(kind.item_type)
    else:
        for i in range(getattr(kind, "num_fields", 0)):  # struct, list kinds, union
            yield from _types_within(kind.field(i).type)


def extension_stored_as(kind, forms) -> bool:
    """Whether an extension type within ``kind`` has a storage type that one of ``forms``
    (``_without_dictionaries`` and its kin) would change: a form those functions cannot
    rewrite, since they do not enter an extension type."""
    import pyarrow as pa

    return any(
        isinstance(t, pa.BaseExtensionType)
        and any(plain(t.storage_type) != t.storage_type for plain in forms)
        for t in _types_within(kind)
    )


def dictionary_in_extension(kind) -> bool:
    """Whether an extension type within ``kind`` is stored as a dictionary (or holds one):
    its dictionary cannot be encoded afresh, and pyarrow aborts the process (a failed C++
    check, no exception) reading such a column of a Parquet file."""
    return extension_stored_as(kind, (_without_dictionaries,))


def _ordered_afresh(column, values):
    """An ordered dictionary column re-encoded from ``values`` (its plain values), keeping the
    order of its own dictionary (the input's categories, the same in every chunk) and only the
    entries these rows hold."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = column.type
    # Input row groups may carry different dictionaries: the first one's order, then the
    # values only later ones hold, so that no value is left without an entry.
    dictionaries = [chunk.dictionary for chunk in column.chunks]
    order = pa.concat_arrays(dictionaries) if dictionaries else pa.array([], kind.value_type)
    order = order.unique()
    kept = order.filter(pc.is_in(order, value_set=values.unique()))
    indices = pc.index_in(values, value_set=kept).cast(kind.index_type)
    if indices.null_count != values.null_count:  # never release a value as null
        raise pa.ArrowInvalid("a value has no dictionary entry")
    return pa.DictionaryArray.from_arrays(indices, kept, ordered=True)


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
    if schema is not None and named_time_zones(schema):
        versions["tz_database"] = tz_database_version()
    lower = name.lower()
    if lower.endswith((".gz", ".bz2", ".xz")):
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
    with _open_binary(os.fspath(path), name) as handle:
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
