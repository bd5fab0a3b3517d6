"""Reader for the ONS Postcode Directory (ONSPD) and National Statistics Postcode Lookup (NSPL).

Accepts the data CSV itself or the published zip, in both generations of column names (before
and after the 2025 renaming: ``oseast1m``/``east1m``, ``osgrdind``/``gridind``, ``ctry``/
``ctry25cd``, ``laua``/``oslaua``/``lad25cd``...).

The file is opened once, as a regular file (``sources._reading``), and everything is read from
that one handle: the header, the rows and the SHA-256 recorded in the provenance.  Messages
name a line and a column by position and role, never a value.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import zipfile
from collections.abc import Iterator

import numpy as np
import pandas as pd

from .._input_files import visible_text
from .._progress import counting
from ..errors import SourceDataError, option_name
from ._reading import (
    BUILDING,
    RecordFault,
    check_members,
    check_row_shapes,
    digest_of_what_was_read,
    file_label,
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
    outside_the_table,
)

__all__ = ["read_onspd", "irish_to_british_grid"]

_CHUNK_ROWS = 250_000
_NORTHERN_IRELAND = "N92000002"
_CHANNEL_ISLANDS_ISLE_OF_MAN = {"L93000001", "M83000003"}
_CI_IOM_AREAS = {"GY", "JE", "IM"}

# Preference order within each role: the first name present in the header is used.
_POSTCODE = [re.compile(p) for p in (r"pcds", r"pcd8", r"pcd7", r"pcd2?")]
_EASTING = [re.compile(p) for p in (r"oseast1m", r"east1m")]
_NORTHING = [re.compile(p) for p in (r"osnrth1m", r"north1m")]
_GRID_QUALITY = [re.compile(p) for p in (r"osgrdind", r"gridind")]
_TERMINATED = [re.compile(r"doterm")]
_COUNTRY = [re.compile(r"ctry\d*(cd)?")]
_DISTRICT = [re.compile(p) for p in (r"lad\d*cd", r"laua", r"oslaua")]

_transformer = None


def irish_to_british_grid(easting, northing) -> tuple[np.ndarray, np.ndarray]:
    """Transform Irish Grid (TM75, EPSG:29903) metres to British National Grid (EPSG:27700)."""
    global _transformer
    if _transformer is None:
        from pyproj import Transformer

        _transformer = Transformer.from_crs(29903, 27700, always_xy=True)
    x, y = _transformer.transform(
        np.asarray(easting, dtype="float64"), np.asarray(northing, dtype="float64")
    )
    x, y = (
        np.atleast_1d(np.asarray(x, dtype="float64")),
        np.atleast_1d(np.asarray(y, dtype="float64")),
    )
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise SourceDataError("Irish Grid to British National Grid transform failed")
    return x, y


def _pick(header: dict[str, str], patterns) -> str | None:
    """Return the original header name matching the first pattern that matches any column."""
    for pattern in patterns:
        for lower, original in header.items():
            if pattern.fullmatch(lower):
                return original
    return None


def _data_member(archive: zipfile.ZipFile, label: str) -> str:
    """The main data CSV in a published zip: the largest ``*_UK.csv``, else the largest CSV."""
    check_members(archive, label)
    csvs = [i for i in archive.infolist() if i.filename.lower().endswith(".csv") and not i.is_dir()]
    if not csvs:
        raise SourceDataError(f"{label}: no CSV file inside the zip")
    uk = [i for i in csvs if i.filename.lower().endswith("_uk.csv")]
    data = [i for i in uk if "data/" in i.filename.lower()] or uk or csvs
    return max(data, key=lambda i: i.file_size).filename


@contextlib.contextmanager
def _open(source: io.BufferedReader, member: str | None, label: str) -> Iterator:
    """The data CSV from its start: the file itself, or its member in the zip (decompressed
    only up to a bound, ``sources._reading.open_member``)."""
    source.seek(0)
    if member is None:
        yield source
    else:
        with zipfile.ZipFile(source) as archive, open_member(archive, member, label) as handle:
            yield handle


def _reread(source: io.BufferedReader, member: str | None, label: str, path: str, opened):
    """Opens the data CSV again from its start (to count a line for a message); the build
    stops if the file was written since ``opened``, as then the count is of other bytes."""

    @contextlib.contextmanager
    def again() -> Iterator:
        with _open(source, member, label) as handle:
            yield handle
        if opened_state(source) != opened:
            raise SourceDataError(
                f"{file_label(path)} changed while it was being read; build again"
            )

    return again


def _read_header(source: io.BufferedReader, member: str | None, label: str) -> list[str]:
    try:
        with _open(source, member, label) as handle:
            return list(pd.read_csv(handle, nrows=0, encoding="utf-8-sig").columns)
    except pd.errors.EmptyDataError:
        raise SourceDataError(f"{label} is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise unreadable(label, exc, lambda: _open(source, member, label)) from None


def _coordinates(chunk: pd.DataFrame, column: str, label: str, where: str) -> np.ndarray:
    """Parse a coordinate column; blank means missing, anything else non-numeric is an error.
    ``where`` names the column by position and role ("column 12 (easting)")."""
    text = chunk[column].str.strip()
    values = pd.to_numeric(text.where(text != ""), errors="coerce").to_numpy(dtype="float64")
    bad = np.isnan(values) & (text != "").to_numpy()
    if bad.any():  # (the chunks' index counts the records from the file's first)
        record = int(chunk.index[int(np.argmax(bad))])
        raise RecordFault(record, f"{label}: ", f": {where} is not a number")
    return values


def read_onspd(
    path: str | os.PathLike, gb_only: bool = False, progress: bool = False, nspl: bool = False
) -> PostcodeTable:
    """Read an ONSPD or NSPL CSV (or published zip) into a :class:`PostcodeTable`.

    Keeps live postcodes with a grid reference.  Northern Ireland rows are moved from the
    Irish Grid to the British National Grid, or dropped when ``gb_only``.  Channel Islands and
    Isle of Man rows, grid quality 9 and blank coordinates are dropped and counted.  The
    table's ``kind`` ("onspd" or "nspl") comes from the header, or from ``nspl`` where the
    header does not say (:func:`_kind`), never from the file's name.
    """
    path = os.fspath(path)
    label = file_label(path)
    with open_source(path, label) as source:
        return _read_open_onspd(source, path, label, gb_only, progress, nspl)


def _kind(district: str | None, nspl: bool, label: str, name: str) -> str:
    """ONSPD or NSPL, from the header's local-authority column: ONSPD's geographies placed by
    grid reference are named "os..." ("oslaua"), NSPL's best-fit ones are not ("laua").  Since
    the 2025 renaming both name it "lad25cd", so there only ``nspl`` (``--nspl``) tells.  The
    name is looked at only to refuse a file whose kind would silently differ from before
    (a name with "nspl" once made it "nspl"): it never decides the kind."""
    said = {"oslaua": "onspd", "laua": "nspl"}.get((district or "").strip().lower())
    flag = option_name("nspl")
    if said == "onspd" and nspl:
        raise SourceDataError(f"{label}: {flag} is given, but the header is ONSPD's (oslaua)")
    if said is not None:
        return said
    if not nspl and "nspl" in os.path.basename(name).lower():
        raise SourceDataError(
            f"{label}: the header does not say whether this is ONSPD or NSPL, and the name says "
            f"NSPL: give {flag} if it is NSPL (the graph records which)"
        )
    return "nspl" if nspl else "onspd"


def _read_open_onspd(
    source: io.BufferedReader, path: str, label: str, gb_only: bool, progress: bool, nspl: bool
) -> PostcodeTable:
    opened = opened_state(source)  # before any byte is read
    member = None
    if zipfile.is_zipfile(source):
        try:
            with zipfile.ZipFile(source) as archive:
                member = _data_member(archive, label)
        except zipfile.BadZipFile:
            raise SourceDataError(f"{label}: not a readable zip file") from None
        label = f"{label}:{visible_text(member)}"

    columns = _read_header(source, member, label)
    position = {c: i + 1 for i, c in enumerate(columns)}  # 1-based, as a spreadsheet counts
    header = {c.strip().lower(): c for c in columns}
    roles = {
        "postcode": _pick(header, _POSTCODE),
        "easting": _pick(header, _EASTING),
        "northing": _pick(header, _NORTHING),
        "grid_quality": _pick(header, _GRID_QUALITY),
        "doterm": _pick(header, _TERMINATED),
        "country": _pick(header, _COUNTRY),
        "laua": _pick(header, _DISTRICT),
    }
    missing = [r for r in ("postcode", "easting", "northing") if roles[r] is None]
    if missing:
        raise SourceDataError(
            f"{label}: not an ONSPD/NSPL file, no column for {', '.join(missing)}"
        )
    wanted = {role: col for role, col in roles.items() if col is not None}
    kind = _kind(roles["laua"], nspl, label, member or path)
    # pandas reads only the wanted columns and would take a row with a field too many or too
    # few as it stands, its coordinates shifted; such a file is refused first.
    check_row_shapes(lambda: _open(source, member, label), label, header=True)

    reasons = [
        "malformed_postcode",
        "channel_islands_isle_of_man",
        "terminated",
        "northern_ireland",
        "grid_quality_9",
        "no_grid_reference",
    ]
    dropped = dict.fromkeys(reasons, 0)
    live: list[pd.DataFrame] = []
    dead: list[pd.DataFrame] = []
    with _open(source, member, label) as handle:
        reader = pd.read_csv(
            handle,
            usecols=list(wanted.values()),
            index_col=False,  # a trailing comma on every row must not shift the columns
            dtype=str,
            keep_default_na=False,
            chunksize=_CHUNK_ROWS,
            encoding="utf-8-sig",
        )
        reader = counting(
            reader,
            progress,
            None,
            f"reading {label}",
            prefix=BUILDING,
            unit="chunk",
        )
        fault = None
        try:
            for chunk in reader:
                kept, located_dead = _filter_chunk(
                    chunk.fillna(""), wanted, dropped, gb_only, label, position
                )
                live.append(kept)
                dead.append(located_dead)
        except RecordFault as exc:
            fault = exc
        except (pd.errors.ParserError, UnicodeDecodeError, zipfile.BadZipFile, EOFError) as exc:
            raise unreadable(label, exc, _reread(source, member, label, path, opened)) from None
    if fault is not None:  # its line, counted in the data read again from its start
        with _reread(source, member, label, path, opened)() as again:
            line = line_of_record(again, fault.record, header=True)
        raise fault.with_line(line) from None

    frame = pd.concat(live, ignore_index=True) if live else pd.DataFrame()
    if frame.empty:
        frame = pd.DataFrame({"postcode": [], "easting": [], "northing": [], "laua": []})
    terminated = pd.concat(dead, ignore_index=True) if dead else None
    # the very bytes read, not whatever the name holds by now
    sha256 = digest_of_what_was_read(source, file_label(path), opened)
    sources = [{"path": recorded_name(path), "sha256": sha256}]
    if member is not None:
        sources[0]["member"] = member
    try:
        return build_table(
            frame,
            dropped=dropped,
            kind=kind,
            sources=sources,
            terminated=terminated,
            with_laua="laua" in wanted,
        )
    except DisagreeingRows as exc:  # its lines, counted in the data read again
        places = []
        for _, record in exc.rows:
            with _reread(source, member, label, path, opened)() as again:
                places.append((label, line_of_record(again, int(record or 0), header=True)))
        raise disagreeing_message(places) from None


def _filter_chunk(
    chunk: pd.DataFrame,
    cols: dict[str, str],
    dropped: dict[str, int],
    gb_only: bool,
    label: str,
    position: dict[str, int],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Classify one chunk; each dropped row is counted under exactly one reason."""
    postcode = normalise_postcodes(chunk[cols["postcode"]].to_numpy())
    easting = _coordinates(
        chunk, cols["easting"], label, f"column {position[cols['easting']]} (easting)"
    )
    northing = _coordinates(
        chunk, cols["northing"], label, f"column {position[cols['northing']]} (northing)"
    )
    area = pd.Series(postcode, dtype=object).str[:2].to_numpy()  # "BT", "GY"... never "B1"
    country = (
        chunk[cols["country"]].str.strip().str.upper().to_numpy() if "country" in cols else None
    )

    malformed = pd.isna(postcode)
    offshore = np.isin(area, list(_CI_IOM_AREAS))
    northern_ireland = area == "BT"
    if country is not None:
        offshore |= np.isin(country, list(_CHANNEL_ISLANDS_ISLE_OF_MAN))
        northern_ireland |= country == _NORTHERN_IRELAND
    terminated = (chunk[cols["doterm"]].str.strip() != "").to_numpy() if "doterm" in cols else False
    quality_9 = (
        (chunk[cols["grid_quality"]].str.strip() == "9").to_numpy()
        if "grid_quality" in cols
        else np.zeros(len(chunk), dtype=bool)
    )
    # (0, 0) is the grid origin at sea: the published files use it for "no location".
    no_grid = np.isnan(easting) | np.isnan(northing) | ((easting == 0) & (northing == 0))

    remaining = np.ones(len(chunk), dtype=bool)
    keep_terminated = np.zeros(len(chunk), dtype=bool)
    for reason, mask in (
        ("malformed_postcode", malformed),
        ("channel_islands_isle_of_man", offshore),
        ("terminated", terminated),
        ("northern_ireland", northern_ireland if gb_only else False),
        ("grid_quality_9", quality_9),
        ("no_grid_reference", no_grid),
    ):
        hit = remaining & mask
        dropped[reason] += int(hit.sum())
        if reason == "terminated":
            keep_terminated = hit
        remaining &= ~hit
    # Terminated rows are kept aside only when located, and never outside the graph's area.
    keep_terminated &= ~quality_9 & ~no_grid & ~(northern_ireland & gb_only)

    # A located row kept (live, or terminated and set aside) must lie on the grid.
    for values, column in ((easting, "easting"), (northing, "northing")):
        zeros = np.zeros_like(values)
        outside = (
            (remaining | keep_terminated)
            & ~no_grid
            & (off_the_grid(values, zeros) if column == "easting" else off_the_grid(zeros, values))
        )
        if outside.any():
            record = int(chunk.index[int(np.argmax(outside))])
            where = f"column {position[cols[column]]} ({column})"
            raise RecordFault(record, f"{label}: ", f": {where} is {GRID_EXTENT_TEXT}")

    easting, northing = easting.copy(), northing.copy()
    convert = northern_ireland & ~no_grid & (remaining | keep_terminated)
    if convert.any():
        easting[convert], northing[convert] = irish_to_british_grid(
            easting[convert], northing[convert]
        )
        # on the Irish Grid, but not where Northern Ireland is: off the graph's map
        astray = convert & outside_the_table(easting, northing)
        if astray.any():
            record = int(chunk.index[int(np.argmax(astray))])
            where = (
                f"columns {position[cols['easting']]} and {position[cols['northing']]} "
                "(easting, northing)"
            )
            raise RecordFault(
                record,
                f"{label}: ",
                f": {where}, Irish Grid coordinates of a Northern Ireland postcode, lie "
                "far outside Northern Ireland",
            )

    kept = pd.DataFrame(
        {
            "postcode": postcode[remaining],
            "easting": easting[remaining],
            "northing": northing[remaining],
            "record": chunk.index[remaining],  # to name its line (sources.table)
        }
    )
    if "laua" in cols:
        laua = chunk[cols["laua"]].str.strip().to_numpy(dtype=object)[remaining]  # a copy
        laua[laua == ""] = None  # blank: no local authority
        kept["laua"] = laua
    dead = pd.DataFrame(
        {
            "postcode": postcode[keep_terminated],
            "easting": easting[keep_terminated],
            "northing": northing[keep_terminated],
            "record": chunk.index[keep_terminated],
        }
    )
    return kept, dead
