"""A graph on disk: one self-describing, hash-checked file that loads by memory mapping.

Layout (format 1, docs/graph.md, "The artefact file"), all integers little-endian:

====================  ==========================================================================
bytes                 content
====================  ==========================================================================
marker line           ``b"POSTCODE-PRIVACY-GRAPH\\x00"``, the format version in ASCII digits, ``\\n``
8                     length L of the JSON header
32                    SHA-256 of the JSON header bytes
L                     JSON header (UTF-8): graph ``sha256``, ``params``, ``provenance``, and for
                      each array its dtype, shape, byte offset (from the data section) and size
zero padding          up to the next multiple of 64: the data section starts there
arrays                ``postcodes`` (fixed-width UTF-8 ``S<w>``), ``node_location`` (<i4),
                      ``loc_indptr`` (<i8), ``loc_indices`` (<i4), ``prior`` (<i8) and, if
                      present, ``location_coordinates`` (<f8, n_locations x 2), each at a
                      64-byte-aligned offset, zero padding between them, nothing after the last
====================  ==========================================================================

Every byte is checked on load: the marker and version, the header against its digest, the
padding against zero, the file size against the header, and the arrays by recomputing the
graph's content hash (``Graph.canonical_sections``) and comparing it with the recorded one.  Any
mismatch raises :class:`ArtefactError`.  The hash is unkeyed: it detects corruption, truncation
and editing, not a forger who recomputes it.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import stat
import struct
from pathlib import Path
from typing import BinaryIO, TypedDict

import numpy as np

from .._input_files import missing_file_message, parse_json
from ..atomic import atomic_output
from ..errors import ArtefactError, GraphError
from .graph import Graph

__all__ = ["save_graph", "write_graph", "load_graph", "MAGIC", "FORMAT_VERSION"]

MAGIC = b"POSTCODE-PRIVACY-GRAPH\x00"
# ``build`` keeps an ONSPD source's terminated postcodes beside the artefact, in this file.
TERMINATED_SUFFIX = ".terminated.parquet"


def terminated_sidecar(artefact: str | os.PathLike) -> Path:
    """Where ``build`` keeps the source's terminated postcodes beside an artefact."""
    return Path(os.fspath(artefact) + TERMINATED_SUFFIX)


FORMAT_VERSION = 1
_ALIGN = 64
_MAX_HEADER = 1 << 26  # 64 MiB: far beyond any real header, small enough to refuse junk early
_DIGEST = 32

# name -> (dtype string, number of dimensions); postcodes has a variable-width "|S" dtype.
_ARRAYS = {
    "postcodes": ("|S", 1),
    "node_location": ("<i4", 1),
    "loc_indptr": ("<i8", 1),
    "loc_indices": ("<i4", 1),
    "prior": ("<i8", 1),
    "location_coordinates": ("<f8", 2),
}


class _ArraySpec(TypedDict):
    """Where one array sits in the data section, as the JSON header records it."""

    dtype: str
    shape: list[int]
    offset: int
    nbytes: int


def _marker(version: int = FORMAT_VERSION) -> bytes:
    return MAGIC + str(version).encode("ascii") + b"\n"


def _align(x: int) -> int:
    return -(-x // _ALIGN) * _ALIGN


# -- save ---------------------------------------------------------------------------------------


def save_graph(graph: Graph, path: str | os.PathLike) -> None:
    """Write ``graph`` to ``path`` atomically (replacing any existing file).

    The file is written to a temporary name in the same directory, flushed and fsynced, then
    moved into place with ``os.replace``, so a reader sees the old file or the complete new one.
    Refuses (GraphError) a graph whose arrays no longer match its ``sha256``.
    """
    with atomic_output(path) as out:
        write_graph(graph, out)


def write_graph(graph: Graph, out: BinaryIO) -> None:
    """Write ``graph`` in the artefact format to the binary handle ``out``, from its start
    (``save_graph``; ``build`` writes through its output claim)."""
    if graph._content_hash() != graph.sha256:
        raise GraphError("the graph's arrays have changed since its sha256 was computed")
    arrays = {
        "postcodes": graph.label_bytes(),
        "node_location": np.ascontiguousarray(graph.node_location, dtype="<i4"),
        "loc_indptr": np.ascontiguousarray(graph.loc_indptr, dtype="<i8"),
        "loc_indices": np.ascontiguousarray(graph.loc_indices, dtype="<i4"),
        "prior": np.ascontiguousarray(graph.prior, dtype="<i8"),
    }
    if graph.location_coordinates is not None:
        arrays["location_coordinates"] = np.ascontiguousarray(
            graph.location_coordinates, dtype="<f8"
        )
    specs: dict[str, _ArraySpec] = {}
    offset = 0
    for name, arr in arrays.items():
        specs[name] = {
            "dtype": arr.dtype.str,
            "shape": list(arr.shape),
            "offset": offset,
            "nbytes": int(arr.nbytes),
        }
        offset = _align(offset + arr.nbytes)
    last = next(reversed(specs.values()))
    header = {
        "format": FORMAT_VERSION,
        "sha256": graph.sha256,
        "n_nodes": len(graph),
        "n_locations": graph.n_locations,
        "arrays": specs,
        "data_nbytes": last["offset"] + last["nbytes"],
        "params": graph.params,
        "provenance": graph.provenance,
    }
    try:
        header_bytes = json.dumps(
            header, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True
        ).encode("ascii")
    except (TypeError, ValueError) as exc:
        raise GraphError("graph params and provenance must be plain JSON values") from exc
    preamble = (
        _marker() + struct.pack("<Q", len(header_bytes)) + _sha256(header_bytes) + header_bytes
    )
    data_start = _align(len(preamble))

    out.write(preamble)
    out.write(bytes(data_start - len(preamble)))
    written = data_start
    for name, arr in arrays.items():
        pad = data_start + specs[name]["offset"] - written
        out.write(bytes(pad))
        out.write(arr.reshape(-1).view(np.uint8).data)  # a view of the bytes, no copy
        written += pad + arr.nbytes


def _sha256(data) -> bytes:
    import hashlib

    return hashlib.sha256(data).digest()


# -- load ---------------------------------------------------------------------------------------


def load_graph(path: str | os.PathLike) -> Graph:
    """Read a graph written by :func:`save_graph`, memory-mapping its arrays.

    Postcondition: the returned graph's arrays hash to the ``sha256`` recorded in the file, the
    header is the one written with them, and nothing in the file was added, removed or changed.
    Raises ArtefactError otherwise, naming what is wrong (never any postcode).
    """
    import mmap

    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        # Without blocking, and judged by the file opened: a FIFO must not hang the run, and a
        # device (/dev/zero) is not an empty artefact but no artefact at all.
        with open(os.open(path, flags), "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a pipe, device or socket"
                raise ArtefactError(f"the graph artefact is not a regular file ({kind})")
            size = info.st_size
            if size == 0:
                raise ArtefactError("graph artefact is empty")
            buf = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        # named, as a missing input or key file is: "No such file or directory" alone left
        # the user to guess which file (a hostile review)
        raise ArtefactError(missing_file_message("the graph artefact", path)) from None
    except OSError as exc:
        raise ArtefactError(f"cannot read graph artefact: {exc.strerror or exc}") from exc

    header, header_end = _read_header(buf, size)
    arrays = _map_arrays(buf, size, header, header_end)
    try:
        graph = Graph._from_verified_arrays(
            arrays["postcodes"],
            arrays["node_location"],
            arrays["loc_indptr"],
            arrays["loc_indices"],
            arrays["prior"],
            arrays.get("location_coordinates"),
            params=header["params"],
            provenance=header["provenance"],
        )
    except GraphError as exc:
        raise ArtefactError(f"graph artefact holds an invalid graph: {exc}") from exc
    except ValueError as exc:  # e.g. labels that are not UTF-8, invalid prior values
        raise ArtefactError(f"graph artefact holds an invalid graph: {exc}") from exc
    if not hmac.compare_digest(graph.sha256, header["sha256"]):
        raise ArtefactError(
            "graph artefact content does not match its recorded sha256: "
            "the file is corrupted or has been edited"
        )
    return graph


def _read_header(buf, size: int) -> tuple[dict, int]:
    """The verified JSON header and the offset just after it."""
    if bytes(buf[: len(MAGIC)]) != MAGIC:
        raise ArtefactError("not a postcode-privacy graph artefact (wrong marker)")
    end = buf.find(b"\n", len(MAGIC), len(MAGIC) + 12)
    digits = bytes(buf[len(MAGIC) : end]) if end > 0 else b""
    if not digits.isdigit():
        raise ArtefactError("graph artefact marker line is damaged")
    version = int(digits)
    if version != FORMAT_VERSION:
        raise ArtefactError(
            f"graph artefact format version {version} is not supported "
            f"(this library reads version {FORMAT_VERSION})"
        )
    pos = end + 1
    if size < pos + 8 + _DIGEST:
        raise ArtefactError("graph artefact is truncated (header missing)")
    (length,) = struct.unpack("<Q", buf[pos : pos + 8])
    digest = bytes(buf[pos + 8 : pos + 8 + _DIGEST])
    start = pos + 8 + _DIGEST
    if length > _MAX_HEADER or start + length > size:
        raise ArtefactError("graph artefact is truncated or its header length is damaged")
    header_bytes = bytes(buf[start : start + length])
    if not hmac.compare_digest(_sha256(header_bytes), digest):
        raise ArtefactError(
            "graph artefact header does not match its checksum: "
            "the file is corrupted or has been edited"
        )
    if not header_bytes.isascii():
        raise ArtefactError("graph artefact header is not ASCII JSON")
    # strict: a key given twice (which json would quietly settle by keeping the last) is refused
    header = parse_json(header_bytes, what="the graph artefact header", error=ArtefactError)
    expected = {
        "format",
        "sha256",
        "n_nodes",
        "n_locations",
        "arrays",
        "data_nbytes",
        "params",
        "provenance",
    }
    well_formed = (
        isinstance(header, dict)
        and set(header) == expected
        and header["format"] == version
        and isinstance(header["params"], dict)
        and isinstance(header["provenance"], dict)
        and isinstance(header["sha256"], str)
        and len(header["sha256"]) == 64
        and isinstance(header["arrays"], dict)
        and all(_is_count(header[k]) for k in ("n_nodes", "n_locations", "data_nbytes"))
    )
    if not well_formed or not isinstance(header, dict):
        raise ArtefactError(f"graph artefact header does not have the format-{version} fields")
    return header, start + length


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _map_arrays(buf, size: int, header: dict, header_end: int) -> dict[str, np.ndarray]:
    specs = header["arrays"]
    names = [name for name in _ARRAYS if name in specs]
    required = set(_ARRAYS) - {"location_coordinates"}
    if set(specs) != set(names) or not required <= set(names):
        raise ArtefactError("graph artefact header lists unexpected or missing arrays")
    data_start = _align(header_end)
    if data_start + header["data_nbytes"] != size:
        raise ArtefactError(
            f"graph artefact is {size} bytes but its header describes "
            f"{data_start + header['data_nbytes']}: the file is truncated or extended"
        )
    _check_zero(buf, header_end, data_start)
    n, n_loc = header["n_nodes"], header["n_locations"]
    expected_shapes = {
        "postcodes": [n],
        "node_location": [n],
        "loc_indptr": [n_loc + 1],
        "prior": [n],
        "location_coordinates": [n_loc, 2],
    }
    arrays, cursor = {}, 0
    for name in names:
        spec = specs[name]
        want_dtype, ndim = _ARRAYS[name]
        try:
            dtype = np.dtype(spec["dtype"])
            shape = [int(x) for x in spec["shape"]]
            offset, nbytes = int(spec["offset"]), int(spec["nbytes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtefactError(f"graph artefact header describes {name} badly") from exc
        ok_dtype = (
            (dtype.str.startswith("|S") and dtype.itemsize > 0)
            if want_dtype == "|S"
            else dtype.str == want_dtype
        )
        if not ok_dtype or len(shape) != ndim or any(x < 0 for x in shape):
            raise ArtefactError(f"graph artefact array {name} has the wrong type or shape")
        if name in expected_shapes and shape != expected_shapes[name]:
            raise ArtefactError(f"graph artefact array {name} has the wrong shape")
        count = math.prod(shape)
        if (
            nbytes != count * dtype.itemsize
            or offset % _ALIGN
            or offset < cursor
            or data_start + offset + nbytes > size
        ):
            raise ArtefactError(f"graph artefact array {name} has an invalid position or size")
        _check_zero(buf, data_start + cursor, data_start + offset)
        arrays[name] = np.frombuffer(
            buf, dtype=dtype, count=count, offset=data_start + offset
        ).reshape(shape)
        cursor = offset + nbytes
    if cursor != header["data_nbytes"]:
        raise ArtefactError("graph artefact has bytes after its last array")
    return arrays


def _check_zero(buf, start: int, stop: int) -> None:
    if stop > start and any(buf[start:stop]):
        raise ArtefactError("graph artefact padding is not zero: the file is corrupted")
