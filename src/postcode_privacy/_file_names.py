"""A file name as text that means the same file on every machine.

Python turns a name's bytes into text with the locale's file-system encoding: under a
UTF-8 locale ``b"caf\\xc3\\xa9.csv"`` is ``"café.csv"``; under the C locale without UTF-8
mode it is ``"caf\\udcc3\\udca9.csv"`` (escaped bytes), and under Latin-1 ``"cafÃ©.csv"``.
What this package writes about a file (a manifest's names, a ledger's recorded path) must
be the same bytes whatever the locale (docs/release.md, "Byte for byte"), so names are
recorded as their bytes read as UTF-8, and a recorded name is turned back into the bytes it
came from.  Where a name must be turned back into the file (a ledger's path) one whose bytes
are not UTF-8 is refused up front; where it is only read by people (a manifest, a graph's
provenance) such bytes are written as ``\\xNN``.
"""

from __future__ import annotations

import os

__all__ = ["OUTPUT_NAME_NOT_UTF8", "name_text", "path_of_text", "readable_name"]

# (one wording wherever an output name is checked: the claim of its files, a ledger's path)
OUTPUT_NAME_NOT_UTF8 = "the output file name is not valid UTF-8 text; choose another name"


def name_text(path: str | os.PathLike) -> str | None:
    """The name's bytes on disk read as UTF-8 text, or ``None`` when they are not UTF-8."""
    try:
        return os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return None


def path_of_text(text: str) -> str:
    """The path, in this process's terms, whose bytes are ``text`` written as UTF-8: the
    inverse of :func:`name_text`, for a name read back from a ledger."""
    return os.fsdecode(text.encode("utf-8"))


def readable_name(path: str | os.PathLike) -> str:
    """The name as :func:`name_text` reads it, with any byte that is not UTF-8 written as
    ``\\xNN``: text for a record people read, the same under any locale, never an error."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")
