"""The files of a table cached on disk beside the graph (the ball-mass profiles, the far-mass
rows): written where nothing else can be, read through one checked handle.

Why: the cache directory may be shared (``$POSTCODE_PRIVACY_CACHE``), so a name in it may hold
anything by the time it is used: a link that a write would follow to another file, a pipe that
a read would wait on for ever, or another file moved in after a check.  What a cached table
holds is then verified by its content hash by the module that reads it (``profiles.py``,
``cluster_balls.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .._signal_holds import signals_deferred

__all__ = ["cache_files", "read_cached_header", "load_cached_array"]


@contextlib.contextmanager
def cache_files(paths: Sequence[Path]) -> Iterator[list[Path]]:
    """Partial files for a cached table to be written to, one for each of ``paths``, in a new
    owner-only directory beside them.  When the block completes they are moved into place in
    the order given, the header last, so a reader that catches a mix of old and new files
    refuses it by the content hash; whatever happens, none is left behind.  A directory of its
    own because the cache may be shared: a name of its own beside the others could already
    hold a link (written through to another file) or a pipe (waited on for ever).  An OSError
    is left as the system raised it: the caller falls back to a table in memory."""
    parent = paths[0].parent
    parent.mkdir(parents=True, exist_ok=True)
    private: Path | None = None
    try:
        with signals_deferred():  # made and noted for removal as one step
            private = Path(tempfile.mkdtemp(prefix=".building-", dir=parent))
        yield [private / path.name for path in paths]
        with signals_deferred():  # all renamed, or none: a stop waits for the last one
            for path in paths:
                os.replace(private / path.name, path)
    finally:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)


def read_cached_header(path: Path) -> object:
    """The JSON header of a cached table; ValueError (the cache is then rebuilt) for anything
    but a small regular file (a pipe there would be waited on for ever)."""
    from .._input_files import MIB, read_small_file

    data = read_small_file(path, what="a cached table's header", limit=MIB, error=ValueError)
    return json.loads(data)


def load_cached_array(path: Path, *, mapped: bool = True) -> np.ndarray:
    """A cached ``.npy`` array, memory-mapped read-only unless ``mapped`` is False; ValueError
    for anything but a regular file.  The file is opened once, without waiting (a pipe there
    would block for ever), and the array read or mapped through that handle: a check of the
    name followed by a second open could meet another file."""
    fmt = np.lib.format
    with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ValueError("a cached table is not a regular file")
        if not mapped:
            return np.load(handle, allow_pickle=False)
        version = fmt.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(handle)
        else:
            raise ValueError("a cached table has an unknown .npy format version")
        if dtype.hasobject:
            raise ValueError("a cached table holds Python objects")
        return np.memmap(
            handle,
            dtype=dtype,
            mode="r",
            shape=shape,
            order="F" if fortran else "C",
            offset=handle.tell(),
        )
