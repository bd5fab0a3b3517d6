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

A command-line argument that names data rather than a file (a column) comes to Python the
same way, through the same encoding, and is read the same way (:func:`argument_text`).
"""

from __future__ import annotations

import os

__all__ = [
    "argument_text",
    "LEDGER_PATH_NOT_UTF8",
    "OUTPUT_NAME_NOT_UTF8",
    "name_text",
    "path_of_text",
    "readable_name",
    "recorded_paths",
]

# (one wording wherever an output name is checked: the claim of its files, a ledger's path)
OUTPUT_NAME_NOT_UTF8 = "the output file name is not valid UTF-8 text; choose another name"
# (one wording for a whole path a ledger cannot record: checked up front and where it records)
LEDGER_PATH_NOT_UTF8 = (
    "the output's whole path is not valid UTF-8 text (a directory's name holds bytes that are "
    "not), and a ledger records it as text: write the release under a path that is"
)


def name_text(path: str | os.PathLike) -> str | None:
    """The name's bytes on disk read as UTF-8 text, or ``None`` when they are not UTF-8."""
    try:
        return os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return None


def argument_text(value: str) -> str:
    """A command-line argument naming data (a column) as its bytes read as UTF-8, like a file
    name, so that the same bytes name the same column under every locale (under Latin-1,
    ``--out-column código`` released a column named ``cÃ³digo``).  An argument whose bytes
    are not UTF-8 (typed in a Latin-1 terminal) is taken as the locale read it, and so is
    text that never came from bytes (a Python caller's ``main([...])`` with "€" under Latin-1,
    which the locale cannot encode)."""
    try:
        text = name_text(value)
    except UnicodeEncodeError:
        return value
    return value if text is None else text


def path_of_text(text: str) -> str:
    """The path, in this process's terms, whose bytes are ``text`` written as UTF-8: the
    inverse of :func:`name_text`, for a name read back from a ledger.  TypeError for a value
    that is not text (a damaged ledger: its caller says so)."""
    if not isinstance(text, str):
        raise TypeError("a recorded path is not text")
    return os.fsdecode(text.encode("utf-8"))


def recorded_paths(text: str) -> list[str]:
    """Where a ledger's recorded path may name a file here: first :func:`path_of_text`; then
    the readings a version before this module may have recorded, which wrote the path as its
    locale read names: the text as this locale reads names, and the text as Latin-1 read a
    name's bytes (``"cafÃ©.csv"`` for a UTF-8 ``café.csv``).  A row settles on whichever holds
    its output (its sha256 decides), and is not abandoned while any holds its manifest, so a
    reading that names another file can only keep a row pending, never settle it wrongly."""
    paths = [path_of_text(text)]
    for name in (text, _latin1_bytes(text)):
        if name is not None and name not in paths and _nameable(name):
            paths.append(name)
    return paths


def _latin1_bytes(text: str) -> str | None:
    try:
        return os.fsdecode(text.encode("latin-1"))
    except UnicodeEncodeError:
        return None


def _nameable(path: str) -> bool:
    """Whether this locale can write ``path`` as a name (text it cannot names nothing here)."""
    try:
        os.fsencode(path)
    except UnicodeError:
        return False
    return True


def readable_name(path: str | os.PathLike) -> str:
    """The name as :func:`name_text` reads it, with any byte that is not UTF-8 written as
    ``\\xNN``: text for a record people read, the same under any locale, never an error.
    (On Windows, where "\\" separates names and the only such bytes are those of a lone
    surrogate, they are written as U+FFFD instead, so that a record's last name stays its
    file's.)"""
    return os.fsencode(path).decode("utf-8", _UNREADABLE_BYTES)


_UNREADABLE_BYTES = "replace" if os.sep == "\\" else "backslashreplace"
