"""What a file on disk is, so that no output ever replaces one it must not.

:func:`never_replaced` tells a key file, a SQLite database (a ledger), the engine's cached
tables, a graph artefact and a release's files from its first bytes, never from its name
alone; :func:`same_file` and :func:`refuse_over_inputs` keep a run from writing over what it
reads, under any name (docs/release.md, "Nothing is lost").  ``atomic.OutputClaim`` asks these
before it claims an output.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping

from .errors import OutputExistsError, option

__all__ = [
    "WRITES_GRAPH",
    "WRITES_RELEASE",
    "never_replaced",
    "refuse_over_inputs",
    "same_file",
]

# The first line of every postcode-privacy key file, whatever its version (mechanism/keys.py),
# and how much of a file to read for it: the key reader takes files of up to 4,096 bytes and
# skips white space before the line.
_KEY_FILE_TEXT = "postcode-privacy key file"
_KEY_FILE_HEAD = 4097
_SQLITE_PREFIX = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database
_NUMPY_PREFIX = b"\x93NUMPY"  # every .npy file
_GRAPH_PREFIX = b"POSTCODE-PRIVACY-GRAPH\x00"  # graph.artefact.MAGIC (a test compares)
# How much of a file is read to tell what it is: the largest file read whole to see whether it
# is a release's manifest or audit file (a JSON object whose "format" names it, in any layout
# ``report --manifest`` reads: a few kilobytes as written); larger files are none.
_DOCUMENT_LIMIT = 1 << 20
_RELEASE_DOCUMENTS = {
    "postcode-privacy-manifest": "a release's manifest",
    "postcode-privacy-audit": "a release's private audit file",
}
_TABLE_HEADERS = ("postcode-privacy-location-profiles/", "postcode-privacy-cluster-balls/")
# SQLite's files beside a database (its write-ahead log, its rollback journal: a hot one holds
# what a crash left to undo) and the side file ``build`` writes beside a graph artefact.
_SQLITE_SIDE_SUFFIXES = ("-wal", "-journal", "-shm")
_GRAPH_SIDECAR_SUFFIX = ".terminated.parquet"  # graph.artefact.TERMINATED_SUFFIX (a test compares)


def _starts_a_key_file(data: bytes) -> bool:
    return data[:_KEY_FILE_HEAD].decode("latin-1").lstrip().startswith(_KEY_FILE_TEXT)


# What an output of each kind may replace, with --force, besides files of no kind below.
WRITES_RELEASE = "release"  # a release, its manifest and its audit file (perturb, demo)
WRITES_GRAPH = "graph"  # a graph artefact (build)


def never_replaced(path: str | os.PathLike, writes: str | None = None) -> str | None:
    """What ``path`` is, if it is a file an output that ``writes`` files of that kind (a
    ``WRITES_*`` constant, or None) may not replace even with ``force``, else None.

    Never replaced by anything: a key file, a SQLite database (a ledger, most likely), a NumPy
    array (the engine's cached tables), or no regular file at all (a pipe, a device such as
    ``/dev/null``, a socket: replacing one with a file, as root could, breaks whatever uses
    it).  Replaced only by an output of its own kind: a release, its manifest or its audit
    file (the audit cannot be made again without the input; ``report -o rel.csv --force``
    would leave a manifest describing a file that is gone), and a graph artefact (the
    national one is the package's cache)."""
    try:
        found = os.stat(path)  # (through a link: what a write would reach)
    except OSError:
        return None
    if not (stat.S_ISREG(found.st_mode) or stat.S_ISDIR(found.st_mode)):
        return "not a regular file (a pipe, a device or a socket)"
    name = os.fspath(path)
    head = _head(path, _DOCUMENT_LIMIT + 1) or b""  # (read once, for every test below)
    if _starts_a_key_file(head):
        return "a postcode-privacy key file"
    if head.startswith(_SQLITE_PREFIX):
        return "a SQLite database (a ledger?)"
    for suffix in _SQLITE_SIDE_SUFFIXES:
        if name.endswith(suffix) and (_head(name[: -len(suffix)], 16) or b"") == _SQLITE_PREFIX:
            return "one of SQLite's files beside a database (a ledger?)"
    if head.startswith(_NUMPY_PREFIX):
        return "a NumPy array file (the engine's cached tables?)"
    form = _document_format(head)
    if form.startswith(_TABLE_HEADERS):
        return "the header of one of the engine's cached tables"
    if writes != WRITES_GRAPH:
        if head.startswith(_GRAPH_PREFIX):
            return "a graph artefact"
        artefact = name.removesuffix(_GRAPH_SIDECAR_SUFFIX)
        if artefact != name and _head(artefact, len(_GRAPH_PREFIX)) == _GRAPH_PREFIX:
            return "the terminated postcodes build keeps beside a graph artefact"
    if writes != WRITES_RELEASE:
        if form in _RELEASE_DOCUMENTS:
            return _RELEASE_DOCUMENTS[form]
        beside = _head(f"{name}.manifest.json", _DOCUMENT_LIMIT + 1) or b""
        if _document_format(beside) == "postcode-privacy-manifest":
            return "a release (its manifest is beside it)"
    return None


def _document_format(data: bytes) -> str:
    """The "format" of the JSON object a file's first bytes ``data`` hold ("" if none, or if
    the file is larger than any such document), read as ``report --manifest`` reads a
    manifest: a byte-order mark, any white space and any order of keys allowed."""
    if len(data) > _DOCUMENT_LIMIT:
        return ""
    if not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{"):
        return ""  # (most files: no need to parse)
    try:
        document = json.loads(data.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        return ""
    form = document.get("format") if isinstance(document, dict) else None
    return form if isinstance(form, str) else ""


def _head(path: str | os.PathLike, size: int) -> bytes | None:
    """The first ``size`` bytes of the regular file at ``path``, or None (anything else is
    never opened: opening a FIFO to read would wait for a writer forever)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as handle:
            return handle.read(size)
    except OSError:
        return None


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path once symbolic links are resolved
    (``b`` need not exist yet), or the same inode (a hard link)."""
    try:
        if os.path.realpath(a) == os.path.realpath(b):
            return True
    except (OSError, ValueError, RuntimeError):  # a symbolic link loop, a NUL in the name
        return False
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_over_inputs(
    targets: Iterable[str | os.PathLike], inputs: Mapping[str, str | os.PathLike | None]
) -> None:
    """Raise OutputExistsError if a target is one of ``inputs`` (by what each is: "the
    manifest") under any name (``same_file``): an input is never replaced, even with force."""
    for target in targets:
        for what, path in inputs.items():
            if path is not None and same_file(target, path):
                raise OutputExistsError(
                    f"the output {target} is {what} this run reads; an input is never "
                    f"replaced, even with {option('force')}: choose another output"
                )
