"""The release plan: validated options plus a mechanism, and the one function that releases rows.

Every way of releasing records (``perturb_frame``, the ``perturb`` command, the Spark path) goes
through :meth:`ReleasePlan.process_chunk`, so the rules of docs/release.md are enforced in one
place:

* each row needs a subject identifier, turned into its canonical text by
  :func:`~postcode_privacy.mechanism.subject.canonical_subject_id`;
* each row needs a postcode that is a UK postcode in form after case and whitespace
  normalisation and is a node of the graph; with ``terminated="nearest"`` a located terminated
  postcode is first mapped to the nearest live node (``terminated.py``);
* a row that fails is handled by the error policy: ``"error"`` refuses the whole chunk (listing
  the failing rows), ``"null"`` leaves its released cell empty, ``"drop"`` leaves it out.

Error messages name 1-based record numbers (the header is not a record) and reasons, never the
identifier or postcode values.
"""

from __future__ import annotations

import hashlib
import math
import numbers
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from ..engine.batch import _perturb_canonical
from ..errors import DuplicateSubjectWarning, InputDataError, option
from ..graph.graph import Graph
from ..mechanism import Key, Mechanism
from ..mechanism.subject import canonical_subject_id
from ..postcodes import try_normalise
from ..version import OUTPUT_STABILITY_VERSION, __version__
from .options import ON_ERROR_POLICIES, TERMINATED_POLICIES, ReleaseOptions

__all__ = ["ReleasePlan", "ChunkCheck", "DuplicateSubjectWarning", "perturb_frame",
           "COUNT_KEYS", "FAILURE_KINDS", "MAX_LISTED_ERRORS", "ON_ERROR_POLICIES",
           "TERMINATED_POLICIES", "merge_counts", "failure_error"]

MAX_LISTED_ERRORS = 20
_WARN_ROWS = 5

# Why a row cannot be released, in the order they are tested (the first that applies counts).
FAILURE_KINDS = ("missing_identifier", "invalid_identifier", "missing_postcode",
                 "malformed_postcode", "unknown_postcode", "over_budget")
_FAILURE_LABELS = {
    "missing_identifier": "missing or blank identifier",
    "invalid_identifier": "unusable identifier",
    "missing_postcode": "missing or blank postcode",
    "malformed_postcode": "malformed postcode",
    "unknown_postcode": "postcode not in the graph",
    "over_budget": "privacy budget exceeded (ledger)",
}
COUNT_KEYS = ("records", "released", "terminated_mapped", *FAILURE_KINDS, "failed", "nulled",
              "dropped", "rows_out")


def _empty_counts() -> dict[str, int]:
    return dict.fromkeys(COUNT_KEYS, 0)


def merge_counts(total: dict[str, int], part: dict[str, int]) -> dict[str, int]:
    """Add ``part`` into ``total`` (in place) and return it."""
    for key, value in part.items():
        total[key] = total.get(key, 0) + int(value)
    return total


def failure_error(row_errors: Sequence[tuple[int, str]], counts: dict[str, int]) -> InputDataError:
    """The error for records that cannot be released under ``on_error="error"``."""
    failed = counts.get("failed", 0)
    reasons = ", ".join(f"{_FAILURE_LABELS[k]}: {counts[k]}" for k in FAILURE_KINDS if counts.get(k))
    return InputDataError(
        f"{failed} of {counts.get('records', 0)} records cannot be released ({reasons}); "
        f"with {option('on_error', 'error')} nothing is released",
        row_errors=list(row_errors[:MAX_LISTED_ERRORS]), total_errors=failed)


def _is_missing(value: object) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return math.isnan(float(value))
    return False


def _identifier(value: object) -> tuple[str | None, str | None, str | None]:
    """(canonical id, failure kind, reason); the reason never contains the value."""
    if _is_missing(value):
        return None, "missing_identifier", "missing identifier"
    try:
        return canonical_subject_id(value), None, None
    except ValueError as exc:
        if isinstance(value, str) and not value.strip():
            return None, "missing_identifier", "blank identifier"
        return None, "invalid_identifier", str(exc)


_KIND = {kind: index for index, kind in enumerate(FAILURE_KINDS)}


def _canonical_identifiers(values: list) -> tuple[list[str | None], dict[int, tuple[str, str]]]:
    """Canonical text of every identifier, and ``{row: (failure kind, reason)}`` for the rest.

    Exactly :func:`_identifier` row by row; the common columns (all text, as read from CSV, or
    all Python integers, as from an integer column) take a vectorised route to the same text.
    """
    types = set(map(type, values))
    if types == {str} and _all_encodable(values):
        normalize = unicodedata.normalize
        canonical: list[str | None] = [normalize("NFC", v).strip() for v in values]
        blank = [i for i, text in enumerate(canonical) if not text]
        return canonical, {i: ("missing_identifier", "blank identifier") for i in blank}
    if types == {int}:
        return list(map(str, values)), {}
    canonical, failures = [], {}
    for i, value in enumerate(values):
        text, kind, reason = _identifier(value)
        canonical.append(text)
        if kind is not None:
            failures[i] = (kind, reason)
    return canonical, failures


def _all_encodable(texts: list[str]) -> bool:
    """False if any text holds a lone surrogate (the row-by-row rule refuses those)."""
    try:
        "".join(texts).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _tracker_hashes(canonical: list[str]) -> np.ndarray:
    """64-bit hashes of canonical identifiers for the run's subject tracker (vectorised
    SipHash of the UTF-8 text, pandas' ``hash_array``).  Used only within one run, in
    memory: they decide nothing but which identifiers a warning counts."""
    if not canonical:
        return np.zeros(0, dtype=np.uint64)
    return pd.util.hash_array(np.array(canonical, dtype=object), categorize=False)


def subject_hash(canonical: str) -> int:
    return int.from_bytes(hashlib.blake2b(canonical.encode("utf-8"), digest_size=8).digest(), "big")


@dataclass
class ChunkCheck:
    """What checking a chunk found: counts by outcome and the failing rows (first few listed).

    ``row_errors`` lists at most :data:`MAX_LISTED_ERRORS` ``(record number, reason)`` pairs;
    ``counts["failed"]`` is the full number.
    """

    counts: dict[str, int] = field(default_factory=_empty_counts)
    row_errors: list[tuple[int, str]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)

    def merge(self, other: ChunkCheck) -> ChunkCheck:
        merge_counts(self.counts, other.counts)
        room = MAX_LISTED_ERRORS - len(self.row_errors)
        if room > 0:
            self.row_errors.extend(other.row_errors[:room])
        return self


@dataclass
class CheckedRecords:
    check: ChunkCheck
    ids: list[str | None]
    nodes: np.ndarray  # node to perturb from, -1 for a failed row
    codes: np.ndarray  # the true postcode as a number (node, or len(graph) + terminated row)


class _SubjectTracker:
    """Which postcode each subject identifier has been seen with, in bounded, compact memory.

    Holds one 64-bit hash of each distinct canonical identifier and one number for its first
    postcode (16 bytes per identifier), in sorted arrays merged chunk by chunk.  It never misses
    an identifier seen with two postcodes within a run; a spurious report needs two different
    identifiers with the same 64-bit hash (probability about n**2 / 2**65 for n identifiers).
    """

    def __init__(self) -> None:
        self._ids = np.zeros(0, dtype=np.uint64)
        self._codes = np.zeros(0, dtype=np.int64)
        self._flagged: set[int] = set()

    @property
    def conflicts(self) -> int:
        return len(self._flagged)

    def add(self, id_hashes: np.ndarray, codes: np.ndarray, rows: np.ndarray) -> list[int]:
        """Record a chunk; return the record numbers at which a new conflict shows, ascending."""
        if id_hashes.size == 0:
            return []
        order = np.lexsort((rows, id_hashes))
        ids, cds, rws = id_hashes[order], codes[order], rows[order]
        first = np.ones(ids.size, dtype=bool)
        first[1:] = ids[1:] != ids[:-1]
        starts = np.flatnonzero(first)
        group = np.cumsum(first) - 1
        # Within the chunk: a row whose code differs from its identifier's first row here.
        first_code = cds[starts][group]
        inner = cds != first_code
        # Against earlier chunks: the identifier's first code then.
        uniq, uniq_code = ids[starts], cds[starts]
        pos = np.searchsorted(self._ids, uniq)
        known = pos < self._ids.size
        known[known] = self._ids[pos[known]] == uniq[known]
        earlier = np.full(uniq.size, -1, dtype=np.int64)
        earlier[known] = self._codes[pos[known]]
        outer = known[group] & (cds != earlier[group])
        new_rows: list[int] = []
        for i in np.flatnonzero(inner | outer):
            key = int(ids[i])
            if key not in self._flagged:
                self._flagged.add(key)
                new_rows.append(int(rws[i]))
        fresh = ~known
        if fresh.any():
            at = np.searchsorted(self._ids, uniq[fresh])
            self._ids = np.insert(self._ids, at, uniq[fresh])
            self._codes = np.insert(self._codes, at, uniq_code[fresh])
        return sorted(new_rows)


class ReleasePlan:
    """A mechanism, a key and validated release options, ready to process chunks of records.

    ``options`` is a :class:`ReleaseOptions` (validated when it was built).  Loose option
    keywords (``epsilon=...``) are still accepted and go through :meth:`ReleaseOptions.build`,
    the one validation, for callers not yet passing the object.  ``graph`` is as for
    :func:`perturb_frame`, or a function of no arguments returning the graph, called once after
    the options have been checked (so that a slow load comes after the quick failures).  ``terminated_locations`` replaces the bundled
    postcode directory as the source of terminated postcodes' coordinates (a DataFrame with
    columns postcode, easting, northing), for graphs from other sources and for tests.

    Options are checked before the graph is loaded, so a bad option fails fast.  The plan keeps
    run-wide state (the subject tracker), so use one plan per release.
    """

    def __init__(self, *, key: Key, options: ReleaseOptions | None = None,
                 graph: Graph | Callable[[], Graph] | None = None,
                 terminated_locations: pd.DataFrame | None = None, **option_kwargs: Any):
        if not isinstance(key, Key):
            raise TypeError("key must be a postcode_privacy.Key")
        if graph is not None and not isinstance(graph, Graph) and not callable(graph):
            raise TypeError("graph must be a postcode_privacy.Graph, a function returning one, "
                            "or None")
        # Built (and so validated) before an expensive graph load.
        self.options = options = ReleaseOptions.build(options, **option_kwargs)
        if graph is None:
            from ..graph.national import default_graph

            graph = default_graph()
        elif not isinstance(graph, Graph):
            graph = graph()
            if not isinstance(graph, Graph):
                raise TypeError("the graph loader did not return a postcode_privacy.Graph")
        self.key = key
        self.id_column = options.id_column
        self.postcode_column = options.postcode_column
        self.out_column = options.out_column
        self.on_error = options.on_error
        self.keep_source_postcode = options.keep_source_postcode
        self.terminated = terminated = options.terminated
        self.mechanism = Mechanism(graph, options.epsilon, options.radius)
        self.graph = graph
        self._nearest = None
        if terminated == "nearest":
            from .terminated import NearestLive, check_sidecar

            check_sidecar(graph, terminated_locations)
            self._nearest = NearestLive(graph, terminated_locations)
        self._terminated_locations = terminated_locations
        # Optional hook of the privacy ledger (ledger/recording.py, LedgerRecorder.screen):
        # called with each chunk's releasable records, returns the positions it refuses.
        self.screen = None
        self._subjects = _SubjectTracker()
        self._brackets: dict = {}  # the engine's bounds on Z by source, kept across chunks
        self._warned = 0  # conflicts already reported in a warning
        self._pending_rows: list[int] = []  # record numbers of conflicts not yet reported

    def __repr__(self) -> str:
        return (f"<ReleasePlan epsilon={self.mechanism.epsilon.text} radius={self.mechanism.radius}"
                f" on_error={self.on_error} terminated={self.terminated} key={self.key.fingerprint}>")

    # -- columns --------------------------------------------------------------------------------

    def check_columns(self, columns: Iterable) -> None:
        """Refuse an input whose columns cannot be released (:meth:`ReleaseOptions.check_columns`)."""
        self.options.check_columns(columns)

    def output_columns(self, columns: Iterable) -> list:
        """The output's columns, in order, for an input with ``columns``."""
        return self.options.output_columns(columns)

    # -- checking -----------------------------------------------------------------------------

    def check_records(self, df: pd.DataFrame, row_offset: int) -> CheckedRecords:
        """Classify every record of ``df``: the release rules, in one place.

        Precondition: ``df`` has the identifier and postcode columns (``check_columns``).
        Postcondition: for each record either ``nodes[i] >= 0`` (releasable, from that node,
        with canonical identifier ``ids[i]``) or exactly one failure is counted, the first that
        applies in ``FAILURE_KINDS`` order; reasons never contain a value.
        """
        n = len(df)
        check = ChunkCheck()
        counts = check.counts
        counts["records"] = n
        ids, id_failures = _canonical_identifiers(df[self.id_column].tolist())
        # Postcodes are classified once per distinct value (files repeat them), then mapped
        # back to the rows; a postcode is looked at only where the identifier is usable.
        outcomes, which = self._postcode_outcomes(df[self.postcode_column].tolist())
        kind = outcomes["kind"][which]
        kind[list(id_failures)] = -1  # the identifier's failure comes first
        released = kind == 0
        nodes = np.where(released, outcomes["node"][which], -1)
        codes = np.where(released, outcomes["code"][which], -1)
        counts["terminated_mapped"] = int(np.count_nonzero(outcomes["mapped"][which] & released))
        for i in np.flatnonzero(~released)[:MAX_LISTED_ERRORS].tolist():
            check.row_errors.append((row_offset + i + 1, id_failures[i][1] if i in id_failures
                                     else self._postcode_reason(FAILURE_KINDS[kind[i]])))
        for failure in id_failures.values():
            counts[failure[0]] += 1
        by_kind = np.bincount(kind[kind > 0], minlength=len(FAILURE_KINDS))
        for k in range(2, len(FAILURE_KINDS)):  # the postcode kinds
            counts[FAILURE_KINDS[k]] += int(by_kind[k])
        for i in np.flatnonzero(~released).tolist():
            ids[i] = None
        if self.screen is not None:
            self._apply_screen(check, ids, nodes, codes, row_offset)
        failed = sum(counts[k] for k in FAILURE_KINDS)
        counts["failed"] = failed
        counts["released"] = n - failed
        if self.on_error == "null":
            counts["nulled"] = failed
        elif self.on_error == "drop":
            counts["dropped"] = failed
        counts["rows_out"] = n - counts["dropped"]
        return CheckedRecords(check, ids, nodes, codes)

    def _apply_screen(self, check: ChunkCheck, ids: list, nodes: np.ndarray, codes: np.ndarray,
                      row_offset: int) -> None:
        """Fail the records the ledger's budget refuses (docs/ledger.md, "Budgets")."""
        refused = self.screen(ids, nodes, row_offset)
        for i in refused:
            nodes[i] = codes[i] = -1
            ids[i] = None
            if len(check.row_errors) < MAX_LISTED_ERRORS:
                check.row_errors.append((row_offset + i + 1, _FAILURE_LABELS["over_budget"]))
        check.counts["over_budget"] += len(refused)
        check.row_errors.sort()

    def _postcode_reason(self, kind: str) -> str:
        if kind == "missing_postcode":
            return "missing or blank postcode"
        if kind == "malformed_postcode":
            return "not a UK postcode in form"
        if self._nearest is not None:
            return ("postcode is well-formed but not in the graph, and the postcode directory "
                    "gives no location for it")
        return ("postcode is well-formed but not in the graph (terminated, non-geographic, or "
                "outside its area)")

    def _postcode_outcome(self, value: object) -> tuple[int, int, int, bool]:
        """(failure kind index or 0, node to release from, true code, mapped?) for one cell.

        Index 0 of FAILURE_KINDS is an identifier kind, so 0 can mean "no failure" here.
        """
        if _is_missing(value) or (isinstance(value, str) and not value.strip()):
            return _KIND["missing_postcode"], -1, -1, False
        norm = try_normalise(value)
        if norm is None:
            return _KIND["malformed_postcode"], -1, -1, False
        node, code, mapped = self._locate(norm, len(self.graph))
        if node < 0:
            return _KIND["unknown_postcode"], -1, -1, False
        return 0, node, code, mapped

    def _postcode_outcomes(self, values: list) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Outcome arrays per distinct postcode cell and, per row, the index of its cell.

        Text cells are grouped by exact equality (``pd.factorize``); any other cell (missing
        values, numbers) is classified on its own, so grouping can never merge cells that the
        rules treat differently.
        """
        if all(type(v) is str for v in values):
            which, distinct = pd.factorize(np.array(values, dtype=object))
            distinct = distinct.tolist()
        else:
            which = np.empty(len(values), dtype=np.int64)
            distinct, position = [], {}
            for i, value in enumerate(values):
                if type(value) is str:
                    at = position.setdefault(value, len(distinct))
                    if at == len(distinct):
                        distinct.append(value)
                else:
                    at = len(distinct)
                    distinct.append(value)
                which[i] = at
        table = [self._postcode_outcome(v) for v in distinct]
        outcomes = {"kind": np.array([t[0] for t in table], dtype=np.int64).reshape(-1),
                    "node": np.array([t[1] for t in table], dtype=np.int64).reshape(-1),
                    "code": np.array([t[2] for t in table], dtype=np.int64).reshape(-1),
                    "mapped": np.array([t[3] for t in table], dtype=bool).reshape(-1)}
        return outcomes, np.asarray(which, dtype=np.int64)

    def _locate(self, norm: str, n_nodes: int) -> tuple[int, int, bool]:
        """(node to release from, code of the true postcode, mapped?) or (-1, -1, False)."""
        node = self.graph.find(norm)
        if node is not None:
            return node, node, False
        if self._nearest is not None:
            row = self._nearest.row_of(norm)
            if row is not None:
                return self._nearest.nearest_node(row), n_nodes + row, True
        return -1, -1, False

    def check_chunk(self, df: pd.DataFrame, row_offset: int = 0) -> ChunkCheck:
        """Check a chunk without perturbing anything (the validation pass of a release).

        Uses exactly the rules of :meth:`process_chunk`; nothing is recorded in the plan.
        """
        self.check_columns(df.columns)
        return self.check_records(df, int(row_offset)).check

    # -- releasing ----------------------------------------------------------------------------

    def _perturb(self, subject_ids: list[str], nodes: np.ndarray) -> np.ndarray:
        """The single call into the engine for every release path: node numbers and the
        identifiers canonicalised once by the record checks, never looked up again.  Returns
        the released labels (an object array), each distinct output labelled once."""
        released = _perturb_canonical(self.mechanism, self.key, subject_ids, nodes,
                                      brackets=self._brackets)
        distinct, where = np.unique(released, return_inverse=True)
        labels = np.array([self.graph.label(y) for y in distinct.tolist()], dtype=object)
        return labels[where.reshape(-1)]

    def process_chunk(self, df: pd.DataFrame, row_offset: int = 0, *,
                      warn: bool = True) -> tuple[pd.DataFrame, dict[str, int]]:
        """Check and release one chunk of records; return ``(output frame, counts)``.

        ``row_offset`` is the number of records before this chunk, so that reported record
        numbers are those of the whole input.  The output has every input column except the
        true postcode (kept if ``keep_source_postcode``), in order, then the released postcode in
        ``out_column``; row order and index are kept (minus dropped rows under ``"drop"``).

        Under ``on_error="error"`` a chunk with any failing row raises :class:`InputDataError`
        listing them, before anything is perturbed.  With ``warn``, a
        :class:`DuplicateSubjectWarning` reports identifiers seen with a second postcode in this
        chunk (compared with every earlier chunk of this plan); otherwise they are kept for
        :meth:`warn_subjects`.
        """
        self.check_columns(df.columns)
        checked = self.check_records(df, int(row_offset))
        counts = checked.check.counts
        if counts["failed"] and self.on_error == "error":
            raise failure_error(checked.check.row_errors, counts)
        ok = np.flatnonzero(checked.nodes >= 0)
        ids = checked.ids
        ok_ids = ids if ok.size == len(ids) else [ids[i] for i in ok.tolist()]
        released = self._perturb(ok_ids, checked.nodes[ok]) if ok.size else []
        hashes = _tracker_hashes(ok_ids)
        new = self._subjects.add(hashes, checked.codes[ok], ok.astype(np.int64) + int(row_offset) + 1)
        if warn and new:
            self._warned += len(new)
            warn_duplicate_subjects(len(new), new, stacklevel=2)
        elif new:
            self._pending_rows = sorted(self._pending_rows + new)[:_WARN_ROWS]
        values = np.full(len(df), None, dtype=object)
        values[ok] = released
        out = df if self.keep_source_postcode else df.drop(columns=[self.postcode_column])
        if self.on_error == "drop":
            out, values = out.iloc[ok], values[ok]
        out = out.copy()
        out.insert(len(out.columns), self.out_column, pd.Series(values, index=out.index, dtype=object))
        return out, counts

    @property
    def subjects_with_several_postcodes(self) -> int:
        """Distinct identifiers seen with more than one postcode by this plan so far."""
        return self._subjects.conflicts

    def warn_subjects(self, *, stacklevel: int = 1) -> None:
        """Emit one :class:`DuplicateSubjectWarning` for conflicts not yet reported."""
        pending = self._subjects.conflicts - self._warned
        if pending > 0:
            warn_duplicate_subjects(pending, self._pending_rows, stacklevel=stacklevel + 1)
        self._warned = self._subjects.conflicts
        self._pending_rows = []

    # -- description, for manifests -------------------------------------------------------------

    def describe(self) -> dict:
        """The release's parameters, as the publishable manifest records them: nothing here is
        computed from the records (never the key itself, never a count)."""
        from .terminated import describe_source

        m = self.mechanism
        bound: Fraction = m.teleport_bound
        return {
            "library_version": __version__,
            "output_stability_version": OUTPUT_STABILITY_VERSION,
            "graph": {"sha256": self.graph.sha256, "nodes": len(self.graph),
                      "params": dict(self.graph.params),
                      "provenance": provenance_summary(self.graph.provenance)},
            "epsilon": m.epsilon.text,
            "radius": m.radius,
            "teleport_bound": {"exact": f"{bound.numerator}/{bound.denominator}",
                               "approx": float(bound)},
            "prior": prior_kind(self.graph),
            "key_fingerprint": self.key.fingerprint,
            "on_error": self.on_error,
            "terminated": self.terminated,
            "terminated_locations": describe_source(self.terminated, self._terminated_locations),
            "columns": {"id": self.id_column, "postcode": self.postcode_column,
                        "out": self.out_column,
                        "source_postcode_kept": self.keep_source_postcode},
        }


def warn_duplicate_subjects(count: int, rows: list[int], *, stacklevel: int) -> None:
    where = ", ".join(str(r) for r in rows[:_WARN_ROWS])
    warnings.warn(
        f"{count} subject identifier(s) appear with more than one postcode (again at record(s) "
        f"{where}{', ...' if count > len(rows[:_WARN_ROWS]) else ''}); each (identifier, "
        "postcode) pair is a separate draw, so such a subject is released more than once",
        DuplicateSubjectWarning, stacklevel=stacklevel + 1)


def prior_kind(graph: Graph) -> str:
    """The prior's kind as the graph records it, else ``"uniform"`` or ``"custom"``."""
    kind = graph.params.get("prior")
    if isinstance(kind, str) and kind:
        return kind
    return "uniform" if bool(np.all(graph.prior == 1)) else "custom"


def provenance_summary(provenance: dict) -> dict:
    """A manifest-sized summary of a graph's provenance (file names, not paths; no long lists)."""
    out: dict = {}
    for key, value in provenance.items():
        if key == "build" and isinstance(value, dict):
            out[key] = {k: value[k] for k in ("nodes", "locations", "location_edges") if k in value}
        elif key == "sources" and isinstance(value, list):
            files = [_file_entry(v) for v in value]
            if len(files) <= 5:
                out[key] = files
            else:
                digest = hashlib.sha256()
                for entry in sorted(files, key=lambda e: (str(e.get("file")), str(e.get("sha256")))):
                    digest.update(f"{entry.get('file')}\0{entry.get('sha256')}\n".encode())
                out[key] = {"files": len(files), "sha256_of_list": digest.hexdigest()}
        elif isinstance(value, dict) and "path" in value:
            out[key] = _file_entry(value)
        else:
            out[key] = value
    return out


def _file_entry(value) -> dict:
    if not isinstance(value, dict):
        return {"file": str(value)}
    entry = {k: v for k, v in value.items() if k != "path"}
    if "path" in value:
        entry = {"file": str(value["path"]).replace("\\", "/").rsplit("/", 1)[-1], **entry}
    return entry


def perturb_frame(df: pd.DataFrame, *, key: Key, graph: Graph | None = None,
                  options: ReleaseOptions | None = None, row_offset: int = 0,
                  progress: bool = False, **option_kwargs: Any) -> pd.DataFrame:
    """Release the postcodes of a pandas DataFrame: the Python form of ``postcode-privacy perturb``.

    The release options (:class:`ReleaseOptions`) are given either as ``options=`` or as
    keywords (``epsilon=1, id_column="person_id", postcode_column="postcode"``, ...), not both.
    Returns a new frame with every column of ``df`` except ``postcode_column`` (kept when
    ``keep_source_postcode``) followed by the released postcode in ``out_column``; ``df`` is not
    modified.  ``graph=None`` uses the embedded national graph; ``radius=None`` the default
    radius for ``epsilon``.  ``on_error`` is ``"error"`` (raise :class:`InputDataError` listing
    every failing record, up to 20, and release nothing), ``"null"`` (empty released cell) or
    ``"drop"`` (leave the row out).  ``terminated="nearest"`` maps located terminated postcodes
    to the nearest live one first.  Record numbers in errors count from ``row_offset + 1``.

    Counts per outcome are in ``result.attrs["postcode_privacy"]["counts"]``, with the plan's
    description (epsilon, radius, graph hash, key fingerprint).  The counts are PRIVATE: exact
    statistics of the true records, for the custodian only; do not publish them with the
    result (docs/release.md, "The manifest").  An identifier seen with two
    different postcodes gives one :class:`DuplicateSubjectWarning`.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError("df must be a pandas DataFrame")
    plan = ReleasePlan(key=key, options=ReleaseOptions.build(options, **option_kwargs), graph=graph)
    plan.check_columns(df.columns)
    step = 10_000 if progress else max(len(df), 1)
    if plan.on_error == "error" and len(df) > step:
        check = ChunkCheck()
        for start in range(0, len(df), step):
            check.merge(plan.check_chunk(df.iloc[start:start + step], row_offset + start))
        if check.failed:
            raise failure_error(check.row_errors, check.counts)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(df), unit=" records", desc="releasing")
    parts, counts = [], _empty_counts()
    try:
        for start in range(0, max(len(df), 1), step):
            out, part = plan.process_chunk(df.iloc[start:start + step], row_offset + start,
                                           warn=False)
            parts.append(out)
            merge_counts(counts, part)
            if bar is not None:
                bar.update(part["records"])
    finally:
        if bar is not None:
            bar.close()
    result = parts[0] if len(parts) == 1 else pd.concat(parts)
    counts["identifiers_with_several_postcodes"] = plan.subjects_with_several_postcodes
    plan.warn_subjects(stacklevel=2)
    result.attrs["postcode_privacy"] = {**plan.describe(), "counts": counts}
    return result
