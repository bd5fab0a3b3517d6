"""Exact ball-mass profiles of every location, to a fixed depth, computed once per graph.

``cumulative[loc, k]`` is the prior mass of the locations within k hops of location ``loc``,
for k = 0 .. ``depth``.  For a true node x at that location the node ball B_k(x) (docs/spec.md,
"Sampling": shell 0 is x alone, shell 1 adds its co-located postcodes) has mass
pi(x) for k = 0 and ``cumulative[loc, k]`` for k >= 1, so the first ``depth`` + 1 shell masses
of every source, and hence C_0 .. C_depth, are known without exploring
(``BoundSources.profile_shells`` in engine/bound_sources.py).  Beyond ``depth`` the engine bounds Z
with the core's bound or, tighter, with the far-mass rows of engine/cluster_balls.py, which
are built and cached beside the table (``BallProfiles.far``); the profile only lets the exact
decision start deep instead of at shell 0.

How the table is computed (``build_profiles``): every location is a source of the bit-parallel
sweeps of engine/ball_sweeps.py (64 nearby sources swept at once, one bit each); the masses
are exact integer sums.

Nothing here decides an output by itself: the table gives exact masses the reference sampler
would compute by exploring, so a correct table changes only the time taken.  A wrong table
would change outputs, so (i) tests compare it with the reference search on generated graphs
and on locations of the national graph; (ii) a cached table is bound to its graph and checked
by content hash on every load, and for the embedded graph that hash is pinned in this module
(``PINNED_SHA256``), so a stale, corrupt or edited file is refused and rebuilt, and a build
that differs is not used; (iii) the engine checks the masses it explores anyway against the
table before drawing (a partial guard: it sees only the shells it explores).  A table for a
custom graph (opt-in) has only its own header hash, which guards against damage, not against
someone who can write to the cache directory.

Cost on the national graph: docs/performance.md ("The ball-mass profile table").
"""

from __future__ import annotations

import json
import threading
import weakref
from pathlib import Path

import numpy as np

from ..errors import CacheWarning, InvalidParameterError, warn_at_caller
from ..graph.graph import Graph
from ..graph.pinned import DEFAULT_GRAPH_SHA256
from .ball_sweeps import Sweeps, mass_dtype, sweep_table, table_sha256
from .cluster_balls import ClusterBalls, cached_cluster_balls, cluster_balls_for
from .forking import start_in_background
from .table_cache import cache_files, load_cached_array, read_cached_header

__all__ = [
    "BallProfiles",
    "build_profiles",
    "cached_profiles",
    "load_profiles",
    "profiles_for",
    "profiles_to_use",
    "DEPTH",
    "FORMAT",
]

DEPTH = 44  # hops of every location's profile (docs/performance.md: what depth buys at each ε)
FORMAT = "postcode-privacy-location-profiles/1"
# The content hash of the table of the embedded graph (pinned like the graph itself): a cached
# file, or a build, whose content differs is refused, whoever recomputed its header.
PINNED_SHA256 = {
    (DEFAULT_GRAPH_SHA256, 40): "bd16739cc5da9eeed6faee2abc714b5155dd471b21d29436bb1caaa6aa35c4d5",
    (DEFAULT_GRAPH_SHA256, 44): "bbca0d9aa4b89ed8f607439b7e2a136cd9bd418e813e7e101a6c165994a8c93b",
}
CACHE_MIN_LOCATIONS = 100_000  # smaller graphs build in memory in seconds


def build_profiles(
    graph: Graph,
    loc_mass: np.ndarray,
    depth: int | None = None,
    *,
    path: Path | None = None,
    progress: bool = False,
    workers: int = 1,
) -> np.ndarray:
    """The table ``cumulative[loc, k]`` (see the module docstring), in memory or, with
    ``path``, written to that ``.npy`` file (by ``workers`` forked processes) and memory-mapped.
    ``depth`` defaults to ``DEPTH``."""
    depth = DEPTH if depth is None else int(depth)
    net = Sweeps(graph, loc_mass)  # every location a source of its own
    stage = "ball-mass profiles (built once per graph, groups of locations)" if progress else None
    return sweep_table(
        net, depth, mass_dtype(graph.total_prior), net.order, path=path, stage=stage,
        workers=workers,
    )  # fmt: skip


class BallProfiles:
    """Every location's cumulative ball masses ``cumulative[loc, k]``, k = 0 .. ``depth``."""

    def __init__(self, cumulative: np.ndarray, graph: Graph):
        self.cumulative = cumulative
        self._rows = np.asarray(cumulative)  # the same memory without np.memmap's overhead
        self.depth = cumulative.shape[1] - 1
        self.graph_sha256 = graph.sha256
        # Upper bounds on the masses past ``depth`` (engine/cluster_balls.py), if available;
        # far_refused: a build of them was not the pinned one (not tried again here).
        self.far: ClusterBalls | None = None
        self.far_refused = False
        self.far_looked_up = False  # the cache was searched for the rows when the table loaded

    def ball_row(self, location: int) -> np.ndarray:
        """pi(B_0(loc)) .. pi(B_depth(loc)) for the location (a view of the table)."""
        return self._rows[location]

    def shell_masses(self, location: int, prior: int, depth: int) -> list[int]:
        """pi(S_0(x)) .. pi(S_depth(x)) for a node x at ``location`` with prior ``prior``,
        ``depth`` <= the table's: shell 0 is x alone, shell 1 adds the other postcodes at its
        location to the neighbouring locations (docs/spec.md, "Sampling")."""
        balls = self._rows[location, : depth + 1].tolist()
        balls[0] = prior  # B_0 is the node alone; B_k for k >= 1 is the location ball
        return [prior] + [b - a for a, b in zip(balls, balls[1:])]


def _header(graph: Graph, depth: int, sha256: str) -> dict:
    return {
        "format": FORMAT,
        "graph_sha256": graph.sha256,
        "depth": depth,
        "locations": graph.n_locations,
        "total_prior": graph.total_prior,
        "dtype": mass_dtype(graph.total_prior).str,
        "sha256": sha256,
    }


def _cache_prefix(graph: Graph) -> Path:
    """The cache path of ``graph``'s tables, up to their depth."""
    from ..graph.national import cache_dir  # the directory the default graph is cached in

    return cache_dir() / f"profiles-{graph.sha256[:32]}-d"


def _paths(graph: Graph, depth: int) -> tuple[Path, Path]:
    stem = _cache_prefix(graph)
    return stem.with_name(f"{stem.name}{depth}.npy"), stem.with_name(f"{stem.name}{depth}.json")


def load_profiles(graph: Graph, depth: int | None = None) -> BallProfiles:
    """The cached table for ``graph``, memory-mapped; ValueError unless every byte checks out
    (format, graph, depth, shape, type and the content hash of the whole table)."""
    depth = DEPTH if depth is None else int(depth)
    table_path, header_path = _paths(graph, depth)
    header = read_cached_header(header_path)
    array = load_cached_array(table_path)
    if not isinstance(header, dict):
        raise ValueError("the ball-mass profiles' header is not a JSON object")
    expected = _header(graph, depth, header.get("sha256", ""))
    if header != expected:
        raise ValueError("the ball-mass profiles were built for another graph or depth")
    if array.shape != (graph.n_locations, depth + 1) or array.dtype.str != expected["dtype"]:
        raise ValueError("the ball-mass profiles have the wrong shape")
    content = table_sha256(array)
    if content != header["sha256"]:
        raise ValueError("the ball-mass profiles failed their content hash")
    _check_pinned(graph, depth, content)
    return BallProfiles(array, graph)


def _check_pinned(graph: Graph, depth: int, content: str) -> None:
    """ValueError if this graph's table at this depth is pinned and ``content`` differs."""
    pinned = PINNED_SHA256.get((graph.sha256, depth))
    if pinned is not None and content != pinned:
        raise ValueError("the ball-mass profiles are not the pinned table of the embedded graph")


def _build_and_cache(
    graph: Graph, loc_mass: np.ndarray, depth: int, workers: int, progress: bool
) -> BallProfiles:
    table_path, header_path = _paths(graph, depth)
    with cache_files([table_path, header_path]) as (partial, header_partial):
        array = build_profiles(
            graph, loc_mass, depth, path=partial, progress=progress, workers=workers
        )
        sha256 = table_sha256(array)
        _check_pinned(graph, depth, sha256)  # a wrong build is neither cached nor used
        header = _header(graph, depth, sha256)
        header_partial.write_text(json.dumps(header, indent=1), encoding="utf-8")
    _remove_other_depths(graph, depth)
    # The array mapped from the file as built and hashed, never the name opened again: by now
    # another file could be there.
    return BallProfiles(array, graph)


def _remove_other_depths(graph: Graph, depth: int) -> None:
    """Delete this graph's cached tables of other depths (left by an earlier version, whose
    depth differed): hundreds of megabytes that nothing reads any more."""
    prefix = _cache_prefix(graph)
    for path in prefix.parent.glob(f"{prefix.name}*"):
        other = path.name[len(prefix.name) :].removesuffix(".npy").removesuffix(".json")
        if other.isdigit() and int(other) != depth:  # never a partial file of a build
            try:
                path.unlink(missing_ok=True)
            except OSError:  # best effort: the new table is cached and used regardless
                pass


_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


# Loads started ahead by ``load_in_background``, by graph: (depth, thread, outcome holder).
_LOADING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _reads_a_table(graph: Graph, wanted: bool | str | None) -> bool:
    """Whether ``profiles_to_use`` reads or builds a table for ``graph`` under ``wanted``:
    not when none is wanted, nor by default for a graph other than the embedded one."""
    return wanted is not False and (wanted is not None or graph.sha256 == DEFAULT_GRAPH_SHA256)


def load_in_background(graph: Graph, wanted: bool | str | None) -> None:
    """Start loading and verifying the cached table that ``profiles_to_use(graph, ...,
    wanted)`` would read, in a thread, so that its content hash (about 0.3 s on the national
    graph; hashlib releases the GIL) is taken while this process does other work, such as a
    release's check pass.  ``cached_profiles`` waits for that load and takes its outcome (a
    refused file is reported there, as always); nothing is built here."""
    if not _reads_a_table(graph, wanted) or graph.n_locations < CACHE_MIN_LOCATIONS:
        return
    with _LOCK:
        if _known(graph, DEPTH) is not None or graph in _LOADING:
            return
        table_path, header_path = _paths(graph, DEPTH)
        if not (table_path.exists() and header_path.exists()):
            return
        outcome: list = []

        def load() -> None:
            try:
                outcome.append(load_profiles(graph, DEPTH))
            except BaseException as exc:  # handed to cached_profiles, which reports it
                outcome.append(exc)

        _LOADING[graph] = (DEPTH, start_in_background(load, "postcode-privacy-profiles"), outcome)


def _load(graph: Graph, depth: int) -> BallProfiles:
    """``load_profiles``, or the outcome of the load started ahead for this graph and depth
    (call under _LOCK)."""
    started = _LOADING.pop(graph, None)
    if started is None or started[0] != depth:
        return load_profiles(graph, depth)
    _, thread, outcome = started
    thread.join()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def _known(graph: Graph, depth: int) -> BallProfiles | None:
    """The table this process already holds for ``graph`` at ``depth`` (call under _LOCK)."""
    table = _TABLES.get(graph)
    return table if table is not None and table.depth == depth else None


def cached_profiles(graph: Graph, depth: int | None = None) -> BallProfiles | None:
    """The profiles of ``graph`` if this process has them or a valid cached file exists (a
    refused file is reported and ignored); never builds."""
    depth = DEPTH if depth is None else int(depth)
    with _LOCK:
        table = _known(graph, depth)
        if table is not None or graph.n_locations < CACHE_MIN_LOCATIONS:
            return table
        table_path, header_path = _paths(graph, depth)
        if not (table_path.exists() and header_path.exists()):
            return None
        try:
            table = _load(graph, depth)
        except (OSError, ValueError, KeyError) as exc:
            warn_at_caller(
                f"the cached ball-mass profiles were refused ({exc}); the next release "
                "large enough to build them rebuilds them (until then releases are slower, "
                "not different)",
                CacheWarning,
            )
            return None
        table.far = cached_cluster_balls(graph)
        table.far_looked_up = True
        _TABLES[graph] = table
        return table


def profiles_for(
    graph: Graph,
    loc_mass: np.ndarray,
    depth: int | None = None,
    workers: int = 1,
    progress: bool = True,
) -> BallProfiles:
    """The profiles of ``graph``, with their far-mass rows (``_add_far_rows``), once per
    process: from the on-disk cache for large graphs (verified by content hash; refused and
    rebuilt if stale or corrupt), else built here
    (with progress lines on stderr for a cached build, unless ``progress`` is False)."""
    depth = DEPTH if depth is None else int(depth)
    table = cached_profiles(graph, depth)
    with _LOCK:
        if table is None:
            table = _known(graph, depth)
        if table is not None:
            _add_far_rows(table, graph, loc_mass, workers, progress)
            return table
        if graph.n_locations >= CACHE_MIN_LOCATIONS:
            try:
                table = _build_and_cache(graph, loc_mass, depth, workers, progress)
            except OSError as exc:
                warn_at_caller(
                    f"could not cache the ball-mass profiles ({exc.strerror or exc}); "
                    "building them in memory",
                    CacheWarning,
                )
        if table is None:  # a small graph, or the cache could not be written
            array = build_profiles(graph, loc_mass, depth)
            _check_pinned(graph, depth, table_sha256(array))  # pinned: used only if equal
            table = BallProfiles(array, graph)
        _TABLES[graph] = table
        _add_far_rows(table, graph, loc_mass, workers, progress)
        return table


def _add_far_rows(
    table: BallProfiles, graph: Graph, loc_mass: np.ndarray, workers: int, progress: bool
) -> None:
    """Give ``table`` the far-mass rows of engine/cluster_balls.py if it has none: cached for
    large graphs (built on first use), in memory otherwise.  (Call under _LOCK.)  Without them
    the engine is slower at small epsilon, never different, so a failure only warns."""
    if table.far is not None or table.far_refused:
        return
    cache = graph.n_locations >= CACHE_MIN_LOCATIONS
    try:
        table.far = cluster_balls_for(
            graph,
            loc_mass,
            cache=cache,
            workers=workers,
            progress=progress,
            look=not table.far_looked_up,
        )
    except OSError as exc:
        warn_at_caller(
            f"could not cache the far-mass rows ({exc.strerror or exc}); building them in "
            "memory, in one process (about two minutes on the national graph)",
            CacheWarning,
        )
        try:
            table.far = cluster_balls_for(graph, loc_mass, cache=False, progress=progress)
        except ValueError as pinned:
            table.far_refused = True
            warn_at_caller(
                f"the far-mass rows were not used ({pinned}); releases are slower, not different",
                CacheWarning,
            )
    except ValueError as exc:  # a build that is not the pinned one: not used
        table.far_refused = True
        warn_at_caller(
            f"the far-mass rows were not used ({exc}); releases are slower, not different",
            CacheWarning,
        )


BUILD_MIN_SOURCES = 20_000  # distinct postcodes in one call that justify a first-use build


def profiles_to_use(
    graph: Graph,
    loc_mass: np.ndarray,
    sources: int,
    wanted: bool | str | None,
    workers: int,
    progress: bool = True,
) -> BallProfiles | None:
    """The table a batch of ``sources`` distinct postcodes should use, per ``wanted``:

    * False: none;
    * True: this graph's, built now if it is not cached (any graph), with its far-mass rows
      (built now too if missing);
    * "cached": this graph's if this process has it or a valid cached file exists (with its
      far-mass rows if they are cached; never builds either);
    * None (the default): as "cached" for the embedded default graph, and built on first use
      there once a batch has ``BUILD_MIN_SOURCES`` distinct postcodes (where exploring from
      shell 0 would cost more than the build); none for other graphs, for which the table
      is optional (pass True).
    """
    if not (wanted is True or wanted is False or wanted is None or wanted == "cached"):
        raise InvalidParameterError('profiles must be True, False, None or "cached"')
    if not _reads_a_table(graph, wanted):
        return None
    table = cached_profiles(graph)
    if wanted == "cached" or (wanted is None and sources < BUILD_MIN_SOURCES):
        return table
    if table is not None and (table.far is not None or table.far_refused):
        return table
    try:
        return profiles_for(graph, loc_mass, workers=workers, progress=progress)
    except ValueError as exc:  # a build that is not the pinned table: not used
        warn_at_caller(
            f"the ball-mass profiles were not used ({exc}); releases are slower, not different",
            CacheWarning,
        )
        return None
