"""Opening a source file and reporting why it cannot be read, without echoing its content.

Every reader of published postcode data (ONSPD, Code-Point Open, population counts) opens the
files a user names through :func:`open_source`, so a FIFO, ``/dev/zero`` or a directory is a
clear :class:`~postcode_privacy.errors.SourceDataError` rather than a hung run or a
memory blow-up, and turns a parser's complaint into a message through :func:`unreadable`,
which keeps the line number and drops the text: Python's and pandas' own messages can quote
bytes of the file ("can't decode byte 0xff", "Not a gzipped file (b'SE')"), and in a
headerless file every row, the first included, is data (docs/graph.md, "Building from source files").

Compressed data (a zip member, a ``.csv.gz``) is read only through :func:`open_member` and
:func:`gunzip`, which stop at a bound on the bytes it decompresses to (:data:`MAX_MEMBER_BYTES`),
so a small "zip bomb" is refused instead of filling memory or running for hours, and which turn
an encrypted member, an unsupported compression method or damaged compressed data into a
:class:`~postcode_privacy.errors.SourceDataError` rather than a traceback.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import lzma
import os
import re
import zipfile
import zlib
from collections.abc import Generator

from .._digest import sha256_of_stream
from .._file_names import readable_name
from .._input_files import open_regular_file, visible_text
from ..errors import SourceDataError

__all__ = [
    "BUILDING",
    "MAX_MEMBER_BYTES",
    "MAX_ZIP_MEMBERS",
    "RecordFault",
    "check_members",
    "check_row_shapes",
    "file_label",
    "digest_of_what_was_read",
    "gunzip",
    "line_as_an_editor_counts",
    "line_of_record",
    "open_member",
    "open_source",
    "recorded_name",
    "opened_state",
    "unreadable",
]

# The stage a graph build shows while it reads its sources and while it builds (graph/build.py).
BUILDING = "Building postcode graph"

# pandas names a malformed row by "line N" (from 1) or "starting at row N" (from 0), counting
# rows, so a line break inside a quoted field is not counted (line_as_an_editor_counts).
_LINE = re.compile(r"\bline (\d+)|\bstarting at row (\d+)")

# The largest published file is ONSPD's data CSV, under 2 GB unpacked (Code-Point Open's are a
# few MB each); a bound of three times that refuses only what no real release is.
MAX_MEMBER_BYTES = 6 << 30
MAX_ZIP_MEMBERS = 10_000  # the published zips hold about a hundred files


def _size(limit: int) -> str:
    return f"{limit >> 30} GiB" if limit >= 1 << 30 else f"{limit >> 20} MiB"


# What damaged compressed data raises, by the codec that meets it.
_DAMAGED = (zlib.error, lzma.LZMAError, zipfile.BadZipFile, EOFError, OSError, ValueError)


class _Bounded(io.RawIOBase):
    """A decompressing stream read only up to ``limit`` bytes, its codec's errors made ours."""

    def __init__(self, stream, label: str, limit: int):
        self._stream = stream
        self._label = label
        self._left = limit
        self._limit = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        # One byte more than the bound says whether there is more than the bound.
        want = min(len(buffer), self._left + 1)
        try:
            data = self._stream.read(want)
        except _DAMAGED:
            raise SourceDataError(
                f"{self._label} is truncated or not in the compressed format its name says"
            ) from None
        if len(data) > self._left:
            raise SourceDataError(
                f"{self._label} decompresses to more than {_size(self._limit)}, more than "
                "any published postcode file (a damaged or hostile archive?)"
            )
        self._left -= len(data)
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            super().close()


def check_members(archive: zipfile.ZipFile, label: str) -> None:
    """Refuse a zip of more members than any published release has, or with two members of
    one name (only the last of them could be read: the others' rows would be lost)."""
    names = archive.namelist()
    if len(names) > MAX_ZIP_MEMBERS:
        raise SourceDataError(
            f"{label}: the zip holds more than {MAX_ZIP_MEMBERS:,} files, more than any "
            "published postcode release"
        )
    if len(set(names)) != len(names):
        raise SourceDataError(
            f"{label}: the zip holds two files of the same name; only one of them could be "
            "read (give a zip with each file once)"
        )


def open_member(
    archive: zipfile.ZipFile, name: str, label: str, limit: int | None = None
) -> io.BufferedReader:
    """Member ``name`` of ``archive``, decompressed, ending with an error past ``limit`` bytes.

    ``label`` names the member in messages.  The size the zip declares is checked first, and
    the bytes read are counted too (``zipfile`` stops at the declared size, but a ``.gz``
    member inside is decompressed again by :func:`gunzip`).
    """
    limit = MAX_MEMBER_BYTES if limit is None else limit
    info = archive.getinfo(name)
    if info.flag_bits & 0x1:
        raise SourceDataError(f"{label} is encrypted; give the file unencrypted")
    if info.file_size > limit:
        raise SourceDataError(
            f"{label} decompresses to more than {_size(limit)}, more than any published "
            "postcode file (a damaged or hostile archive?)"
        )
    try:
        stream = archive.open(info)
    except NotImplementedError:
        raise SourceDataError(
            f"{label} is compressed by a method this reader does not support (use deflate)"
        ) from None
    except (zipfile.BadZipFile, RuntimeError, OSError):
        raise SourceDataError(f"{label}: the zip's entry for it is damaged") from None
    return io.BufferedReader(_Bounded(stream, label, limit))


def gunzip(handle, label: str, limit: int | None = None) -> io.BufferedReader:
    """The gzip data in ``handle``, decompressed, ending with an error past ``limit`` bytes."""
    limit = MAX_MEMBER_BYTES if limit is None else limit
    return io.BufferedReader(_Bounded(gzip.GzipFile(fileobj=handle, mode="rb"), label, limit))


def file_label(path: str | os.PathLike) -> str:
    """The name a message gives a source file: its base name, hidden characters made visible."""
    path = os.fspath(path)
    return visible_text(os.path.basename(path.rstrip("/\\")) or path)


def recorded_name(path: str | os.PathLike) -> str:
    """The name the provenance records for a source: the last name of its absolute path (as
    the release manifest records a file), so that the artefact's bytes do not depend on where
    the source lay or on the directory the build ran in."""
    return readable_name(os.path.basename(os.path.abspath(os.fspath(path))))


def open_source(path: str | os.PathLike, label: str) -> io.BufferedReader:
    """``path`` opened for reading; a missing file, a FIFO, a device or a directory is refused."""
    return open_regular_file(path, what=label, error=SourceDataError)


def opened_state(handle) -> tuple[int, int, int]:
    """What a write to the open file changes: its size and its modification and change times
    (``digest_of_what_was_read`` compares it with the state after the hash)."""
    found = os.fstat(handle.fileno())
    return found.st_size, found.st_mtime_ns, found.st_ctime_ns


def digest_of_what_was_read(handle, label: str, opened: tuple[int, int, int]) -> str:
    """Hex SHA-256 of the open file ``handle`` (read again from its start) for provenance,
    refused if the file was written since ``opened`` (taken before it was parsed): the digest
    must be of the bytes the build used.  A file replaced under its name is no matter (this
    handle still reads the file that was parsed); one rewritten in place is."""
    handle.seek(0)
    digest = sha256_of_stream(handle)
    if opened_state(handle) != opened:
        raise SourceDataError(f"{label} changed while it was being read; build again")
    return digest


class RecordFault(SourceDataError):
    """A fault in data record ``record`` (0-based; pandas skips blank lines, so not a line):
    the reader that parsed the file turns it into a message naming the record's line
    (:func:`line_of_record`) with ``with_line``."""

    def __init__(self, record: int, before_line: str, after_line: str):
        super().__init__(f"{before_line}record {record + 1}{after_line}")
        self.record, self.before_line, self.after_line = record, before_line, after_line

    def with_line(self, line: int) -> SourceDataError:
        return SourceDataError(f"{self.before_line}line {line}{self.after_line}")


def _rows_with_lines(handle) -> Generator[tuple[int, list[str] | None], None, None]:
    """(the line it starts on, as an editor counts lines, and its fields) of every row of the
    CSV bytes ``handle`` reads from where it stands; a row the csv module cannot read (an
    unterminated quote) comes with None and ends the rows.  Used only to word messages, so a
    second pass over the data costs nothing otherwise.  Close it (``contextlib.closing``):
    that gives ``handle`` back and puts the csv module's field limit back."""
    text = io.TextIOWrapper(handle, encoding="utf-8-sig", errors="replace", newline="")
    reader = csv.reader(text)
    limit = csv.field_size_limit(2**31 - 1)  # pandas has no limit on a field's length
    try:
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error:
                yield start, None
                return
            yield start, row
    finally:
        csv.field_size_limit(limit)
        text.detach()


def line_of_record(handle, record: int, *, header: bool) -> int:
    """The line on which data record ``record`` (0-based, as pandas numbers the rows it
    returns) starts in the CSV bytes ``handle`` reads from where it stands: blank lines, which
    pandas skips, and quoted fields that span lines are counted as an editor counts them."""
    seen = -1 if header else 0
    with contextlib.closing(_rows_with_lines(handle)) as rows:
        for start, row in rows:
            if row is None:
                break
            if _is_blank(row):
                continue
            if seen == record:
                return start
            seen += 1
    return record + (2 if header else 1)  # (pandas read it: not reached)


# A row longer than this is no published postcode file's; pyarrow needs a bound on a row's bytes.
_BLOCK_BYTES = 16 << 20


def _is_blank(fields: list[str]) -> bool:
    # a line that is empty or holds only spaces and tabs: pandas skips it, and so does this check
    return len(fields) <= 1 and not "".join(fields).strip(" \t\r")


def _fields(count: int) -> str:
    return "1 field" if count == 1 else f"{count:,} fields"


def check_row_shapes(open_data, label: str, *, header: bool) -> None:
    """Refuse a CSV any of whose rows has more or fewer fields than the first, naming the line
    as an editor counts it.

    pandas reads only the columns it is asked for and fills a short row with blanks, so a row
    with a field too many or too few would be read shifted or truncated without a word.
    pyarrow's parser, which counts every row's fields, reads the file first (fast, on every
    core); only if it objects is the file read again with the csv module, which counts rows as
    pandas does (a line of spaces is no row): it names the first row of another width, or
    finds none, and the file is read as before.  pyarrow's own message, which quotes the row,
    is never shown.  ``open_data()`` opens the CSV bytes from their start; ``header``: its
    first row is a header (the message then counts from "the header row", else from its line)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        with open_data() as handle:
            reader = pacsv.open_csv(
                handle,
                read_options=pacsv.ReadOptions(
                    block_size=_BLOCK_BYTES,
                    autogenerate_column_names=True,  # row 1 counts too
                ),
                parse_options=pacsv.ParseOptions(newlines_in_values=True),
                convert_options=pacsv.ConvertOptions(
                    include_columns=["f0"],
                    column_types={"f0": pa.binary()},  # no decoding
                ),
            )
            for _ in reader:
                pass
        return
    except pa.ArrowException:
        pass  # a row of another width, or something else pyarrow refuses: looked at below
    with open_data() as handle, contextlib.closing(_rows_with_lines(handle)) as rows:
        expected, basis = None, ""
        for start, row in rows:
            if row is None:
                raise SourceDataError(
                    f"{label} is not a well-formed CSV file at line {start} (a stray quote?)"
                )
            if _is_blank(row):
                continue
            if expected is None:
                expected, basis = len(row), "the header row" if header else f"line {start}"
            elif len(row) != expected:
                raise SourceDataError(
                    f"{label} is not a well-formed CSV file at line {start}: it has "
                    f"{_fields(len(row))} where {basis} has {expected} (a stray quote, or a "
                    "field too many or too few?)"
                )


def line_as_an_editor_counts(handle, row: int) -> int:
    """The line on which row ``row`` (1-based, counting every row, blank ones included, as
    pandas' messages count them) starts in the CSV bytes ``handle`` reads from its position:
    pandas counts a quoted field that spans lines as one line, an editor as several."""
    with contextlib.closing(_rows_with_lines(handle)) as rows:
        for number, (start, _) in enumerate(rows, start=1):
            if number == row:
                return start
    return row  # the csv module reads the rows before it otherwise: pandas' count stands


def unreadable(label: str, exc: BaseException, reread=None) -> SourceDataError:
    """Why ``label`` cannot be read, from a parser's exception, naming at most a line.

    ``reread``, when given, opens the bytes parsed again from their start, so that the line
    named is counted as an editor counts it (:func:`line_as_an_editor_counts`)."""
    if isinstance(exc, UnicodeDecodeError):
        reason = "is not UTF-8 text"
    elif isinstance(exc, zipfile.BadZipFile):
        reason = "is not a readable zip file"
    elif isinstance(exc, (EOFError, OSError)):  # gzip.BadGzipFile is an OSError
        reason = "is truncated or not in the compressed format its name says"
    else:  # pandas' ParserError, EmptyDataError, ValueError
        found = _LINE.search(str(exc))
        where = ""
        if found:
            row = int(found.group(1)) if found.group(1) else int(found.group(2)) + 1
            if reread is not None:
                with reread() as handle:
                    row = line_as_an_editor_counts(handle, row)
            where = f" at line {row}"
        reason = (
            f"is not a well-formed CSV file{where} (a stray quote, or a row with extra fields?)"
        )
    return SourceDataError(f"{label} {reason}")
