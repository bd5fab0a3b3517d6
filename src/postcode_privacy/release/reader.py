"""Reading an input table (CSV or Parquet) in chunks, refusing what cannot be read safely.

CSV is read as UTF-8 (a byte-order mark is allowed) with every cell as text, exactly as
written: nothing is converted to a number, so identifiers keep their leading zeros and other
columns come out as they went in.  Parquet columns keep their Arrow types.  The reader never
holds more than one chunk in memory.

Problems with the file as a whole (empty, unreadable, damaged or truncated compression, not
UTF-8, ragged rows, duplicate column names, more than :data:`MAX_COLUMNS` columns or a header
line above :data:`MAX_HEADER_CHARS` characters) raise :class:`InputDataError` naming a line of
the file, a record or a column, never a cell value.

Parquet files written by pandas carry "pandas metadata" that turns some columns back into an
index.  It is ignored on reading and not written: every column the file stores (an index stored
as ``__index_level_0__`` included) is an ordinary column of the release (docs/release.md); it is
read only to name a column asked for that is a RangeIndex, which pandas does not store.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import os
import re
import warnings
from collections.abc import Iterator
from typing import Any

import pandas as pd

from .._file_names import name_text
from ..atomic import refuse_directory_path
from ..errors import InputDataError, InvalidParameterError, option_name
from .arrow_types import nested_dictionary, refuse_dictionaries_in_extensions, without_views
from .column_labels import duplicate_columns_message
from .csv_lines import (
    PANDAS_BUFFER,
    LastLineEnded,
    blank_and_empty_lines,
    blank_line_message,
    blanks_only,
    csv_field_limit,
    first_bad_utf8_line,
    first_long_record,
    is_text_after_quote,
    survey_lines,
    text_after_quote_line,
    unclosed_quote_line,
)
from .csv_text import first_unshowable, has_text
from .formats import (
    READ_ERRORS,
    compression_named_but_absent,
    is_compressed,
    open_decompressed,
    os_reason,
    table_format,
)
from .type_words import type_words

__all__ = [
    "TableReader",
    "read_failure",
    "first_invalid_record",
    "refuse_columns_csv_cannot_hold",
    "refuse_postcodes_not_text",
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


# What a file renamed ``.csv`` without being re-saved starts with: a newcomer's likeliest
# step after a spreadsheet is refused by name, which met only "not UTF-8 text".  A Parquet
# file also ends with its mark (a CSV header "PAR1_code" does not).
_SHEET = "save the sheet as CSV (UTF-8)"
_NOT_CSV_STARTS = (
    (b"PK\x03\x04", f"a zip archive (an .xlsx or .ods spreadsheet is one), not CSV text: {_SHEET}"),
    (
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",
        f"an old-style (.xls) spreadsheet, not CSV text: {_SHEET}",
    ),
)
_PARQUET_MARK = b"PAR1"


def _ends_with(path: str, tail: bytes) -> bool:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() < len(tail):
            return False
        handle.seek(-len(tail), os.SEEK_END)
        return handle.read() == tail


class TableReader:
    """The header and the chunks of one input table.

    Construction reads only the header (and, for Parquet, the footer); :meth:`chunks` can be
    called more than once, each call reading the file again from the start.
    """

    def __init__(self, path: str | os.PathLike, chunk_size: int):
        refuse_directory_path(path, "input", InputDataError)  # "in.csv/" is not "in.csv"
        self.path = os.fspath(path)
        self.format = table_format(self.path, "input")
        self.chunk_size = int(chunk_size)
        self.num_rows: int | None = None
        self.arrow_schema: Any = None  # pyarrow.Schema of a Parquet input (pyarrow has no types)
        # The schema a Parquet input's chunks are given to pandas in (``without_views``).
        self._pandas_schema: Any = None
        # Columns whose every value must have CSV text (``refuse_values_csv_cannot_show``).
        self._csv_columns: set = set()
        # Names of pandas RangeIndexes a Parquet input records only in its pandas metadata.
        self.metadata_indexes: list[str] = []
        # whether pandas may skip empty lines, once the lines are checked (``_check_lines``)
        self._skip_blank_lines: bool | None = None
        self._unended = False  # the last line has no line end (``_check_lines`` says)
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
            with open_decompressed(self.path) as raw:
                start = raw.read(len(codecs.BOM_UTF8))
                if not start:
                    raise InputDataError("the input file is empty")
                if start == codecs.BOM_UTF8 and not raw.read(1):
                    raise InputDataError(
                        "the input file is empty (it holds only a byte-order mark)"
                    )
            with open_decompressed(self.path) as raw, csv_field_limit(MAX_HEADER_CHARS):
                text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
                lines = _HeaderLines(text)
                # strict: a name with text after its closing quote ("pco"de) is refused here,
                # before the names are matched (_refuse_text_after_quotes: the records)
                reader = csv.reader(lines, strict=True)
                while True:
                    first_line = reader.line_num + 1  # (the line the next record starts on)
                    try:
                        row = next(reader)
                    except StopIteration:
                        break
                    except csv.Error as exc:
                        if not is_text_after_quote(exc):
                            raise
                        message = _text_after_quote_message(first_line, "header line")
                        raise InputDataError(message) from None
                    if blanks_only(row):
                        raise InputDataError(blank_line_message(reader.line_num))
                    if row:
                        return _bounded_columns(row)
                    lines.next_record()  # an empty line before the header
        except UnicodeDecodeError:
            raise InputDataError(self._encoding_message()) from None
        except csv.Error:
            raise InputDataError("the input's header line is not well-formed CSV") from None
        except READ_ERRORS as exc:
            raise InputDataError(read_failure(self.path, exc)) from None
        raise InputDataError("the input file has no header line (it holds only blank lines)")

    def _encoding_message(self) -> str:
        try:
            with open_decompressed(self.path) as raw:
                start = raw.read(8)
            parquet = start.startswith(_PARQUET_MARK) and not is_compressed(self.path)
            parquet = parquet and _ends_with(self.path, _PARQUET_MARK)
        except READ_ERRORS:
            start, parquet = b"", False
        if parquet:
            return "the input is a Parquet file, not CSV text: name it .parquet"
        for signature, what in _NOT_CSV_STARTS:  # (a file renamed .csv, not re-saved)
            if start.startswith(signature):
                return f"the input is {what}"
        try:
            line = first_bad_utf8_line(self.path)
        except READ_ERRORS:
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
        errors = (UnicodeDecodeError, pd.errors.ParserError, ValueError, *READ_ERRORS)
        with contextlib.ExitStack() as opened:
            try:
                # Compressed input is read through the package's own reader, not pandas'
                # (compression="infer"): that one loses the records after a damaged bzip2 or
                # xz stream without a word (formats.open_decompressed).  Plain input is opened
                # here too: given a name, pandas expands "~" and fetches "file://" or
                # "http://" names, so it could read a file other than the one checked and hashed.
                source: Any
                if is_compressed(self.path):
                    source = opened.enter_context(open_decompressed(self.path))
                else:
                    source = opened.enter_context(open(self.path, "rb"))
                if self._unended:
                    source = opened.enter_context(
                        io.BufferedReader(LastLineEnded(source), buffer_size=1 << 20)
                    )
                reader = pd.read_csv(
                    source,
                    sep=",",
                    header=0,
                    names=self.columns,
                    index_col=False,
                    dtype=str,
                    keep_default_na=False,
                    na_filter=False,
                    chunksize=self.rows_per_chunk,
                    encoding="utf-8",
                    compression=None,
                    skip_blank_lines=self._skip_blank_lines,
                    engine="c",
                )
            except (*errors, pd.errors.EmptyDataError) as exc:
                raise self._csv_error(exc) from None
            with reader:
                while True:
                    try:
                        with warnings.catch_warnings():
                            # A first record longer than the header would silently become an
                            # index.
                            warnings.simplefilter("error", pd.errors.ParserWarning)
                            chunk = next(reader)
                    except StopIteration:
                        return
                    except (*errors, pd.errors.ParserWarning) as exc:
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
            survey = survey_lines(self.path)
            self._unended = survey.unended
            if survey.quoted:
                self._refuse_text_after_quotes()
            if not (survey.could_start_blank or survey.could_be_empty):
                return False
            lines = blank_and_empty_lines(self.path)
        except (csv.Error, UnicodeDecodeError, *READ_ERRORS):
            return True  # the reading pass reports what is wrong with the file
        if lines.blank is not None:
            raise InputDataError(blank_line_message(lines.blank))
        if lines.empty is None:
            return False
        buffer_fault = lines.starts_blank and survey.size > PANDAS_BUFFER
        # (a carriage return inside a quoted cell is no line end: only the lines decide)
        carriage_fault = survey.lone_cr and lines.cr_empty_before_record
        if not (buffer_fault or carriage_fault):
            return True
        why = "records start with spaces or tabs" if buffer_fault else "lines end in a lone CR"
        raise InputDataError(
            f"line {lines.empty} of the file is empty, and the CSV reader cannot skip empty "
            f"lines safely in this file ({why}): remove the empty lines"
        )

    def _long_record_error(self, record: int, line: int, fields: int) -> InputDataError:
        return InputDataError(
            f"record {record} (starting on line {line} of the file) has {fields} fields; the "
            f"header has {len(self.columns)}"
        )

    def _refuse_text_after_quotes(self) -> None:
        """A quoted cell with text after its closing quote is refused, naming its line: pandas
        would read it as another text than the one written (``text_after_quote_line``)."""
        line = text_after_quote_line(self.path)
        if line is not None:
            raise InputDataError(_text_after_quote_message(line, "record"))

    def _csv_error(self, exc: BaseException) -> InputDataError:
        if isinstance(exc, UnicodeDecodeError):
            return InputDataError(self._encoding_message())
        if isinstance(exc, pd.errors.ParserWarning):  # (the first record: pandas says no more)
            found = first_long_record(self.path, len(self.columns))
            if found is not None:
                return self._long_record_error(*found)
            return InputDataError("the first record has more fields than the header")
        if isinstance(exc, pd.errors.EmptyDataError):
            return InputDataError("the input file is empty")
        if isinstance(exc, READ_ERRORS):
            return InputDataError(read_failure(self.path, exc))
        message = str(exc)
        more = re.search(r"Expected (\d+) fields in line (\d+), saw (\d+)", message)
        if more:
            # pandas counts records, not lines: find the line in the file ourselves, since a
            # quoted cell may hold line breaks.
            found = first_long_record(self.path, len(self.columns))
            if found is not None:
                return self._long_record_error(*found)
            return InputDataError(
                f"record {int(more.group(2)) - 1} has {more.group(3)} fields; "
                f"the header has {more.group(1)}"
            )
        if isinstance(exc, pd.errors.ParserError):
            opened = unclosed_quote_line(self.path)
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
            # An open file, not a name: given "~/in.parquet", pyarrow reads $HOME's file, not
            # the one the name means here (which was checked and hashed), and a name can read
            # as a URI; pa.OSFile opens the name as it is (and closes with the ParquetFile's
            # close(force=True)).
            if name_text(self.path) == self.path:
                source = pa.OSFile(self.path)
            else:  # pyarrow opens a name's UTF-8 bytes; Python opens this locale's bytes
                source = pa.PythonFile(open(self.path, "rb"), mode="r")
        except (pa.ArrowException, OSError, ValueError):
            raise InputDataError("the input is not a readable Parquet file") from None
        try:
            # INT96 timestamps (Spark's and Hive's older format) are read in microseconds:
            # in nanoseconds, pyarrow's default, a date past 2262 or before 1677 (9999-12-31,
            # a common "valid to") wraps round silently.
            return pq.ParquetFile(source, coerce_int96_timestamp_unit="us")
        except (pa.ArrowException, OSError, ValueError):
            source.close()
            raise InputDataError("the input is not a readable Parquet file") from None

    def _parquet_header(self) -> list[str]:
        import pyarrow as pa

        handle = self._parquet_file()
        try:
            leaves = handle.metadata.num_columns  # a struct's or list's fields count each
            if leaves > MAX_COLUMNS:
                raise InputDataError(_too_many_columns(leaves, len(handle.schema_arrow)))
            # pandas metadata would turn stored columns into an index: every stored column is
            # an ordinary column here (module docstring).
            self.metadata_indexes = _range_index_names(handle.schema_arrow.metadata)
            schema = handle.schema_arrow.remove_metadata()
            refuse_dictionaries_in_extensions(schema)
            self.num_rows = int(handle.metadata.num_rows)
        finally:
            handle.close(force=True)
        self.arrow_schema = schema
        self._pandas_schema = pa.schema([f.with_type(without_views(f.type)) for f in schema])
        return _bounded_columns(list(schema.names))

    def _parquet_chunks(self) -> Iterator[pd.DataFrame]:
        import pyarrow as pa

        handle = self._parquet_file()
        offset = 0
        try:
            for batch in self._parquet_batches(handle):
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
            handle.close(force=True)

    def _parquet_batches(self, handle) -> Iterator[Any]:
        """The file's record batches, of at most ``rows_per_chunk`` records.

        pyarrow cannot make a batch that spans row groups of a column with a dictionary inside
        a struct, list or map ("nested data conversions not implemented for chunked array
        outputs"), so such a file is read one row group at a time: smaller chunks, the same
        output (it never depends on the chunk size)."""
        import pyarrow as pa

        nested = any(nested_dictionary(kind) for kind in self.arrow_schema.types)
        groups = [[g] for g in range(handle.num_row_groups)] if nested else [None]
        for group in groups:
            batches = handle.iter_batches(
                batch_size=self.rows_per_chunk, row_groups=group, use_pandas_metadata=False
            )
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                except (pa.ArrowException, OSError, ValueError):
                    raise InputDataError("the input Parquet file is damaged or truncated") from None
                yield batch

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
        if self.arrow_schema is not None:
            refuse_postcodes_not_text(self.arrow_schema.field(options.postcode_column).type)

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


def refuse_postcodes_not_text(kind) -> None:
    """Refuse a postcode column of Arrow type ``kind`` (a Parquet file's, or a Spark
    DataFrame's as Arrow) that does not hold text (or only nulls).  Stored as
    binary values (as Impala, older Hive and Spark without ``binaryAsString`` write text),
    numbers or lists, every record was refused as "not a UK postcode in form", which sent the
    user looking for bad postcodes that are not there (a hostile review)."""
    cells = type_words(_cells_type(kind))
    if cells not in ("text", "nulls"):
        what = type_words(kind)
        hint = " (text written as binary values: cast the column to string)" * (
            cells == "binary values"
        )
        raise InputDataError(
            f"the postcode column ({option_name('postcode_column')}) holds {what}, not text: "
            f"store the postcodes as a string column{hint}"
        )


def _cells_type(kind):
    """The Arrow type of the cells a column of type ``kind`` holds: through dictionary,
    run-end and extension encodings, so that a dictionary of binary values gets the same
    "cast to string" hint as plain binary values (an open item of round 35)."""
    import pyarrow as pa

    types = pa.types
    if types.is_dictionary(kind) or getattr(types, "is_run_end_encoded", bool)(kind):
        return _cells_type(kind.value_type)
    if isinstance(kind, pa.BaseExtensionType):
        return _cells_type(kind.storage_type)
    return kind


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


def _too_many_columns(count: int, top_level: int | None = None) -> str:
    """``count`` columns (for Parquet, leaf columns: a nested column's fields count each, and
    ``top_level`` is how many columns the file shows)."""
    if top_level is not None and top_level != count:
        return (
            f"the input has {top_level:,} columns holding {count:,} stored columns (each "
            f"field of a nested column counts); at most {MAX_COLUMNS:,} are supported "
            "(drop the columns the release does not need)"
        )
    return (
        f"the input has {count:,} columns; at most {MAX_COLUMNS:,} are supported "
        "(drop the columns the release does not need)"
    )


def _bounded_columns(columns: list) -> list:
    if len(columns) > MAX_COLUMNS:
        raise InputDataError(_too_many_columns(len(columns)))
    return columns


def read_failure(path: str, exc: BaseException) -> str:
    """The message for an input that could not be read, in the CLI's terms."""
    if is_compressed(path) and not isinstance(exc, FileNotFoundError | PermissionError):
        named = compression_named_but_absent(path)
        if named is not None:
            suffix, format_name = named
            return (
                f"the input's name ends .{suffix} but the file does not start as "
                f"{format_name} data does: name it for what it holds (.csv for plain text)"
            )
        return "the compressed input is damaged or ends early (truncated?)"
    if isinstance(exc, FileNotFoundError):  # worded as release_file's own check words it
        return missing_input_message(path)
    return f"cannot read the input file: {os_reason(exc)}"


def missing_input_message(path: str | os.PathLike) -> str:
    """ "The input file does not exist: <path> (looked for in <directory>)"."""
    from .._input_files import missing_file_message

    return missing_file_message("the input file", path)


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


def _text_after_quote_message(line: int, what: str) -> str:
    return (
        f"the input is not well-formed CSV: the {what} starting on line {line} of the file has "
        "text after the closing quote of a quoted cell (a quote inside a cell is written "
        'twice, with the whole cell quoted: "a ""b"" c")'
    )
