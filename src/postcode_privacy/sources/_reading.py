"""Opening a source file and reporting why it cannot be read, without echoing its content.

Every reader of published postcode data (ONSPD, Code-Point Open, population counts) opens the
files a user names through :func:`open_source`, so a FIFO, ``/dev/zero`` or a directory is a
clear :class:`~postcode_privacy.errors.SourceDataError` rather than a hung run or a
memory blow-up, and turns a parser's complaint into a message through :func:`unreadable`,
which keeps the line number and drops the text: Python's and pandas' own messages can quote
bytes of the file ("can't decode byte 0xff", "Not a gzipped file (b'SE')"), and in a
headerless file every row, the first included, is data (docs/graph.md, "Building from source files").
"""

from __future__ import annotations

import io
import os
import re
import zipfile

from .._digest import sha256_of_stream
from .._input_files import open_regular_file, visible_text
from ..errors import SourceDataError

__all__ = ["file_label", "open_source", "source_sha256", "unreadable"]

_LINE = re.compile(r"\bline (\d+)")  # pandas counts lines from 1 (its "row" from 0)


def file_label(path: str | os.PathLike) -> str:
    """The name a message gives a source file: its base name, hidden characters made visible."""
    path = os.fspath(path)
    return visible_text(os.path.basename(path.rstrip("/\\")) or path)


def open_source(path: str | os.PathLike, label: str) -> io.BufferedReader:
    """``path`` opened for reading; a missing file, a FIFO, a device or a directory is refused."""
    return open_regular_file(path, what=label, error=SourceDataError)


def source_sha256(path: str | os.PathLike, label: str) -> str:
    """Hex SHA-256 of the regular file at ``path`` (for provenance records)."""
    with open_source(path, label) as handle:
        return sha256_of_stream(handle)


def unreadable(label: str, exc: BaseException) -> SourceDataError:
    """Why ``label`` cannot be read, from a parser's exception, naming at most a line."""
    if isinstance(exc, UnicodeDecodeError):
        reason = "is not UTF-8 text"
    elif isinstance(exc, zipfile.BadZipFile):
        reason = "is not a readable zip file"
    elif isinstance(exc, (EOFError, OSError)):  # gzip.BadGzipFile is an OSError
        reason = "is truncated or not in the compressed format its name says"
    else:  # pandas' ParserError, EmptyDataError, ValueError
        found = _LINE.search(str(exc))
        where = f" at line {found.group(1)}" if found else ""
        reason = (
            f"is not a well-formed CSV file{where} (a stray quote, or a row with extra fields?)"
        )
    return SourceDataError(f"{label} {reason}")
