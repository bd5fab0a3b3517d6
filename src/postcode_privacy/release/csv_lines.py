"""Finding lines in a CSV input, for messages and for the checks pandas' reader needs.

pandas counts records, not lines, and a quoted cell may hold line breaks, so an error that
names "line N of the file" finds N here with Python's CSV reader, which splits lines and quotes
as pandas does.  The same reading finds the lines pandas would misread (a line of blanks, an
empty line it cannot skip safely: ``TableReader._check_lines``).
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import os
import sys
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from .formats import READ_ERRORS, open_decompressed

__all__ = [
    "first_bad_utf8_line",
    "csv_field_limit",
    "blanks_only",
    "blank_line_message",
    "survey_lines",
    "record_lines",
    "blank_and_empty_lines",
    "unclosed_quote_line",
    "text_after_quote_line",
    "is_text_after_quote",
    "first_long_record",
    "PANDAS_BUFFER",
]


def first_bad_utf8_line(path: str) -> int | None:
    """1-based line of the file holding the first byte sequence that is not UTF-8, counting
    lines as the CSV readers do: LF, CR and CRLF each end one."""
    number = 1  # the line the next piece starts on
    with open_decompressed(path) as handle:
        for first, piece in enumerate(handle):  # pieces end at each LF
            skip = 3 if first == 0 and piece.startswith(codecs.BOM_UTF8) else 0
            try:
                piece[skip:].decode("utf-8")
            except UnicodeDecodeError as exc:
                return number + piece[: skip + exc.start].count(b"\r")
            lone_crs = piece.count(b"\r") - piece.endswith(b"\r\n")
            number += lone_crs + piece.endswith(b"\n")
    return None


@contextlib.contextmanager
def csv_field_limit(at_least: int) -> Iterator[None]:
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


def blanks_only(row: list[str]) -> bool:
    """Whether a CSV row is one field of nothing but spaces or tabs (a line of blanks, unless
    the field was quoted)."""
    return len(row) == 1 and bool(row[0]) and not row[0].strip(" \t")


def blank_line_message(line: int) -> str:
    return (
        f"line {line} of the file holds only spaces or tabs: it is neither a record nor an "
        "empty line; remove it, or write its fields"
    )


class _Survey(NamedTuple):
    could_start_blank: bool  # some line starts with a space or a tab
    could_be_empty: bool  # some line is empty
    lone_cr: bool  # some carriage return is not followed by a line feed
    size: int  # bytes (after decompression)
    unended: bool  # the last line has no line end (and the file is not empty)
    quoted: bool  # some byte is a double quote


# The end of pandas' C reader's read buffer (its default chunk): where a line's leading blanks
# can straddle it, its blank-line search loses them.
PANDAS_BUFFER = 262_144


def survey_lines(path: str) -> _Survey:
    """What the raw bytes say the lines could hold, by byte searches (fast); lines inside
    quoted cells count too, so a True here is only a "could"."""
    start_blank = empty = lone_cr = quoted = False
    size = 0
    with open_decompressed(path) as raw:
        tail = b"\n"  # as if a line break came before the file: its first line starts here
        first = True
        while block := raw.read(_SCAN_BLOCK):
            if first:
                block = block.removeprefix(b"\xef\xbb\xbf")
                first = False
            size += len(block)
            quoted = quoted or b'"' in block
            for data in (tail + block[:1], block):  # the pair across the blocks' edge, then all
                start_blank = start_blank or any(mark in data for mark in _LINE_STARTS_BLANK)
                empty = empty or any(mark in data for mark in _EMPTY_LINE)
            if not lone_cr and (tail == b"\r" or b"\r" in block):  # most files have no CR
                # a CR at the very end waits for the next block to say what follows it
                data = tail + block
                lone_cr = data[:-1].count(b"\r") != data.count(b"\r\n")
            tail = block[-1:]
        lone_cr = lone_cr or tail == b"\r"
    unended = size > 0 and tail not in (b"\n", b"\r")
    return _Survey(start_blank, empty, lone_cr, size, unended, quoted)


class LastLineEnded(io.RawIOBase):
    """The bytes of the binary stream ``source``, then a line feed if they do not end in a line
    end.  pandas' C reader fails on some files whose last line is unended ("Buffer overflow
    caught" for a CR-ended file whose last line is a lone delimiter), or not, as the chunk
    size falls; an ended last line is the same records, and reads alike at every size."""

    def __init__(self, source) -> None:
        self._source = source
        self._last = b"\n"
        self._ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._ended:
            return 0
        count = self._source.readinto(buffer)
        if count:
            self._last = bytes(buffer[count - 1 : count])
            return count
        self._ended = True
        if self._last in (b"\n", b"\r"):
            return 0
        buffer[0:1] = b"\n"
        return 1

    def close(self) -> None:
        self._source.close()
        super().close()


def is_text_after_quote(error: csv.Error) -> bool:
    """Whether Python's CSV reader, in strict mode, refused a quoted cell with text after its
    closing quote (its words: "',' expected after '\"'")."""
    return "expected after" in str(error)


class _TextAfterQuote(Exception):
    """A quoted cell with text after its closing quote, in the record starting on ``line``."""

    def __init__(self, line: int):
        super().__init__(line)
        self.line = line


def _records_with_lines(
    path: str, *, strict: bool = False
) -> Iterator[tuple[int, list[str], str, bool]]:
    """(line of the file the record starts on, its fields, the raw text of that line, whether
    the record is that one line) for every record by Python's CSV reader, which splits lines
    and quotes as pandas does (a quote inside an unquoted field is text; LF, CR and CRLF all
    end a line).  ``strict``: a quoted cell with text after its closing quote raises
    :class:`_TextAfterQuote`."""
    with open_decompressed(path) as raw, csv_field_limit(sys.maxsize // 2):
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        last: list[str] = []

        def lines() -> Iterator[str]:
            for line in text:
                last.append(line)
                yield line

        reader = csv.reader(lines(), strict=strict)
        while True:
            start = reader.line_num + 1
            last.clear()
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                if strict and is_text_after_quote(exc):
                    raise _TextAfterQuote(start) from None
                raise
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
    except (*READ_ERRORS, ValueError, csv.Error):  # (changed or unreadable since: no lines)
        return {}
    return found if number == total else {}


class _Lines(NamedTuple):
    blank: int | None  # the first line of nothing but spaces or tabs
    empty: int | None  # the first empty line
    starts_blank: bool  # some record starts with a space or a tab
    # some empty line ended by a lone carriage return (outside quotes) has a record after it
    cr_empty_before_record: bool


def blank_and_empty_lines(path: str) -> _Lines:
    """What the lines outside quoted cells hold, by Python's CSV reader (which splits lines
    and quotes as pandas does)."""
    empty = None
    starts_blank = pending_cr = cr_before_record = False
    for line, row, raw, one_line in _records_with_lines(path):
        if not row:
            empty = line if empty is None else empty
            pending_cr = pending_cr or raw == "\r"
            continue
        if one_line and blanks_only(row):
            if raw.rstrip("\r\n") == row[0]:  # unquoted: the line itself is the blanks
                return _Lines(line, empty, True, cr_before_record)
        cr_before_record = cr_before_record or pending_cr
        starts_blank = starts_blank or raw[:1] in (" ", "\t")
    return _Lines(None, empty, starts_blank, cr_before_record)


def text_after_quote_line(path: str) -> int | None:
    """The line on which the first record holding a quoted cell with text after its closing
    quote (``"SID0000"1``, ``"a"b"``) starts, or None.  pandas' reader joins such a cell's
    pieces into one text (``SID00001``), which is not the cell as written: two identifiers could
    become one, a postcode be read that was never written (docs/release.md)."""
    try:
        for _ in _records_with_lines(path, strict=True):
            pass
    except _TextAfterQuote as found:
        return found.line
    except (csv.Error, UnicodeDecodeError, *READ_ERRORS):
        return None  # the reading pass says what else is wrong with the file
    return None


def unclosed_quote_line(path: str) -> int | None:
    """The line on which the record holding a never-closed quoted cell starts, or None: Python's
    CSV reader, like pandas, runs such a cell to the end of the file, so it is the last record,
    and it holds a quote, or the file ends inside the quote (``"abc`` with no line break after
    it, where the cell read holds neither)."""
    last = None
    try:
        for line, row, _, _ in _records_with_lines(path):
            last = (line, row)
    except (csv.Error, UnicodeDecodeError, *READ_ERRORS):
        return None
    if last is None:
        return None
    if any('"' in cell or "\n" in cell or "\r" in cell for cell in last[1]):
        return last[0]
    return last[0] if _ends_inside_quote(path) else None


def _ends_inside_quote(path: str) -> bool:
    """Whether the file ends inside a quoted cell: Python's CSV reader in strict mode says
    "unexpected end of data" there, where the lenient one closes the cell silently."""
    try:
        for _ in _records_with_lines(path, strict=True):
            pass
    except _TextAfterQuote:
        return False  # (another fault, found first: the reader says that one)
    except csv.Error as exc:
        return "unexpected end of data" in str(exc)
    except (UnicodeDecodeError, *READ_ERRORS):
        return False
    return False


def first_long_record(path: str, width: int) -> tuple[int, int, int] | None:
    """(record number, line of the file it starts on, fields) of the first record with more
    than ``width`` fields, by Python's CSV reader, which counts the lines inside quoted cells."""
    try:
        record = -1  # the header is not a record
        for start, row, _, _ in _records_with_lines(path):
            if row:
                record += 1
                if record > 0 and len(row) > width:
                    return record, start, len(row)
    except (csv.Error, UnicodeDecodeError, *READ_ERRORS):
        return None
    return None
