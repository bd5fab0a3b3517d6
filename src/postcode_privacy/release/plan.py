"""The release plan: options, key and mechanism, and the one function that releases rows.

Every way of releasing records (``perturb_frame``, the ``perturb`` command, the Spark path) goes
through :meth:`ReleasePlan.process_chunk`, or its three steps (``prepare_chunk``,
``PendingChunk.start``, ``finish_chunk``) where ``perturb`` overlaps chunks, so the rules of
docs/release.md are enforced in one place: the records are checked by
:class:`~postcode_privacy.release.records.RecordRules`, a
record that fails is handled by the error policy (``"error"`` refuses the whole chunk listing
the failing rows, ``"null"`` leaves its released cell empty, ``"drop"`` leaves it out), and the
others go to the engine in one call.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from .._interrupts import stop_if_told
from ..engine import Draws, start_draws
from ..errors import InvalidParameterError
from ..graph.graph import Graph
from ..mechanism import Key, Mechanism
from .displacement import Displacement
from .options import ReleaseOptions
from .records import (
    CheckedRecords,
    ChunkCheck,
    RecordRules,
    Screen,
    failure_error,
    over_budget_error,
)
from .subjects import WARN_ROWS, _SubjectTracker, _tracker_hashes, warn_duplicate_subjects

__all__ = ["PendingChunk", "ReleasePlan"]


class ReleasePlan:
    """A mechanism, a key and validated release options, ready to process chunks of records.

    ``options`` is a :class:`ReleaseOptions` (validated when it was built).  Loose option
    keywords (``epsilon=...``) are still accepted and go through :meth:`ReleaseOptions.build`,
    the one validation, for callers not yet passing the object.  ``graph`` is as for
    :func:`perturb_frame`, or a function of no arguments returning the graph, called once after
    the options have been checked (so that a slow load comes after the quick failures).
    ``terminated_locations`` replaces the bundled postcode directory as the source of terminated postcodes' coordinates (a DataFrame with
    columns postcode, easting, northing), for graphs from other sources and for tests.

    Options are checked before the graph is loaded, so a bad option fails fast.  The plan keeps
    run-wide state (the subject tracker), so use one plan per release.
    """

    def __init__(
        self,
        *,
        key: Key,
        options: ReleaseOptions | None = None,
        graph: Graph | Callable[[], Graph] | None = None,
        terminated_locations: pd.DataFrame | None = None,
        **option_kwargs: Any,
    ):
        if not isinstance(key, Key):
            raise TypeError("key must be a postcode_privacy.Key")
        if graph is not None and not isinstance(graph, Graph) and not callable(graph):
            raise TypeError(
                "graph must be a postcode_privacy.Graph, a function returning one, or None"
            )
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
        nearest = None
        from .terminated import NearestLive, check_sidecar, describe_source

        if terminated == "nearest":
            check_sidecar(graph, terminated_locations)
            nearest = NearestLive(graph, terminated_locations)
        self.rules = RecordRules(graph, options, nearest)
        # Described now, from the table the mapping was built from: the caller may change
        # their frame later, but not what this plan maps with.
        self.terminated_source = describe_source(terminated, terminated_locations)
        # Optional hook of the privacy ledger (ledger/recording.py, LedgerRecorder.screen):
        # called with each chunk's releasable records, returns the positions it refuses.
        self.screen: Screen | None = None
        self._subjects = _SubjectTracker()
        self._brackets: dict = {}  # the engine's bounds on Z by source, kept across chunks
        # The engine's ball-mass profile policy (engine/profiles.py, ``profiles_to_use``);
        # Spark executors set "cached" so that no executor builds the table itself.
        self.profiles: bool | str | None = None
        self.quiet = False  # no progress lines from a first-use build of that table
        self._warned = 0  # conflicts already reported in a warning
        self._pending_rows: list[int] = []  # record numbers of conflicts not yet reported
        # Optional, for the operator only (release/displacement.py): never in a manifest.
        self.displacement: Displacement | None = None

    def __repr__(self) -> str:
        return (
            f"<ReleasePlan epsilon={self.mechanism.epsilon.text} radius={self.mechanism.radius}"
            f" on_error={self.on_error} terminated={self.terminated} key={self.key.fingerprint}>"
        )

    # -- columns --------------------------------------------------------------------------------

    def check_columns(self, columns: Iterable, *, header_line: bool = False) -> None:
        """Refuse an input whose columns cannot be released (:meth:`ReleaseOptions.check_columns`)."""
        self.options.check_columns(columns, header_line=header_line)

    def output_columns(self, columns: Iterable) -> list:
        """The output's columns, in order, for an input with ``columns``."""
        return self.options.output_columns(columns)

    # -- checking -----------------------------------------------------------------------------

    def check_records(self, df: pd.DataFrame, row_offset: int) -> CheckedRecords:
        """Classify every record of ``df`` (:meth:`RecordRules.check_records`), the ledger's
        screen included.  Precondition: ``df`` has the identifier and postcode columns."""
        return self.rules.check_records(df, checked_row_offset(row_offset), self.screen)

    def check_chunk(self, df: pd.DataFrame, row_offset: int = 0) -> ChunkCheck:
        """Check a chunk without perturbing anything (the validation pass of a release).

        Uses exactly the rules of :meth:`process_chunk`; nothing is recorded in the plan.
        """
        return self.checked_chunk(df, row_offset).checked.check

    def checked_chunk(self, df: pd.DataFrame, row_offset: int = 0) -> PendingChunk:
        """A chunk with its records checked, failures and all (:meth:`check_chunk` keeps
        only the verdicts; :meth:`prepare_chunk` refuses failures under ``on_error="error"``)."""
        self.check_columns(df.columns)
        offset = checked_row_offset(row_offset)
        return PendingChunk(self, df, offset, self.check_records(df, offset))

    # -- releasing ----------------------------------------------------------------------------

    def process_chunk(
        self,
        df: pd.DataFrame,
        row_offset: int = 0,
        *,
        warn: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[pd.DataFrame, dict[str, int]]:
        """Check and release one chunk of records; return ``(output frame, counts)``.

        ``row_offset`` is the number of records before this chunk, so that reported record
        numbers are those of the whole input.  The output has every input column except the
        true postcode (kept if ``keep_source_postcode``), in order, then the released postcode in
        ``out_column``; row order and index are kept (minus dropped rows under ``"drop"``).

        Under ``on_error="error"`` a chunk with any failing row raises :class:`InputDataError`
        listing them, before anything is perturbed.  With ``warn``, a
        :class:`DuplicateSubjectWarning` reports identifiers seen with a second postcode in this
        chunk (compared with every earlier chunk of this plan); otherwise they are kept for
        :meth:`warn_subjects`.  ``progress``, if given, is called with numbers of records as
        the engine finishes them (per engine task, not per chunk), and once with the records
        not perturbed; the calls add up to ``len(df)``.

        The same as :meth:`prepare_chunk`, then :meth:`PendingChunk.start`, then
        :meth:`finish_chunk`, which a caller may interleave with other chunks' steps.
        """
        pending = self.prepare_chunk(df, row_offset)
        pending.start(progress)
        return self.finish_chunk(pending, warn=warn, progress=progress)

    def prepare_chunk(self, df: pd.DataFrame, row_offset: int = 0) -> PendingChunk:
        """The first step of :meth:`process_chunk`: check the chunk's records (raising
        :class:`InputDataError` under ``on_error="error"`` if any fails); nothing is drawn or
        recorded in the plan yet, but the ledger's screen (if any) has seen the chunk, so
        chunks must be prepared in input order."""
        stop_if_told()  # (a stop Python dropped must not let the release run on: _interrupts)
        pending = self.checked_chunk(df, row_offset)
        check = pending.checked.check
        if check.counts["failed"] and self.on_error == "error":
            raise failure_error(check.row_errors, check.counts, terminated=self.terminated)
        if check.counts["over_budget"]:  # whatever on_error says (over_budget_error)
            raise over_budget_error(check)
        return pending

    def finish_chunk(
        self,
        pending: PendingChunk,
        *,
        warn: bool = True,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[pd.DataFrame, dict[str, int]]:
        """The last step of :meth:`process_chunk`: wait for the chunk's draws, record its
        subjects, and build its output frame.  Chunks must be finished in input order."""
        if pending.checked.check.counts["over_budget"]:  # (a caller that skipped prepare_chunk)
            pending.cancel()
            raise over_budget_error(pending.checked.check)
        ok = pending.ok
        drawn = pending.wait() if ok.size else np.empty(0, dtype=np.int64)
        self.record_subjects(pending, warn=warn)
        out = self.released_frame(pending.df, ok, pending.checked.nodes[ok], drawn, progress)
        return out, pending.checked.check.counts

    def record_subjects(self, pending: PendingChunk, *, warn: bool) -> None:
        """Note the subjects of a checked chunk's accepted records, which must come in input
        order; with ``warn``, warn at once of identifiers seen with a second postcode, otherwise
        keep them for :meth:`warn_subjects`."""
        ok = pending.ok
        hashes = _tracker_hashes(pending.accepted)
        new = self._subjects.add(
            # by the node drawn from: a terminated postcode and the live one it maps to are
            # one draw, so one subject at both is released once
            hashes,
            pending.checked.nodes[ok],
            ok.astype(np.int64) + pending.row_offset + 1,
        )
        if warn and new:
            self._warned += len(new)
            warn_duplicate_subjects(len(new), new)
        elif new:
            self._pending_rows = sorted(self._pending_rows + new)[:WARN_ROWS]

    def forget_subjects(self) -> None:
        """Start the subject tracking again (the chunks noted so far will be noted again)."""
        self._subjects = _SubjectTracker()
        self._warned = 0
        self._pending_rows = []

    def released_frame(
        self,
        df: pd.DataFrame,
        ok: np.ndarray,
        nodes: np.ndarray,
        drawn: np.ndarray,
        progress: Callable[[int], None] | None = None,
    ) -> pd.DataFrame:
        """The output frame of a chunk whose records at positions ``ok`` were released from
        ``nodes`` to ``drawn``: every input column (minus the true postcode unless it is kept),
        then the released postcode, empty for the other records (or without them under
        ``"drop"``).  ``progress`` is told of the records not perturbed."""
        released: np.ndarray | list = []
        if ok.size:
            if self.displacement is not None:
                self.displacement.add(nodes, drawn)
            distinct, where = np.unique(drawn, return_inverse=True)
            labels = np.array(self.graph.labels_of(distinct), dtype=object)
            released = labels[where.reshape(-1)]
        if progress is not None and len(df) > ok.size:
            progress(len(df) - int(ok.size))
        values = np.full(len(df), None, dtype=object)
        values[ok] = released
        out = df if self.keep_source_postcode else df.drop(columns=[self.postcode_column])
        if self.on_error == "drop":
            out, values = out.iloc[ok], values[ok]
        out = out.copy()
        out.insert(
            len(out.columns), self.out_column, pd.Series(values, index=out.index, dtype=object)
        )
        return out

    @property
    def subjects_with_several_postcodes(self) -> int:
        """Distinct identifiers seen with more than one postcode by this plan so far."""
        return self._subjects.conflicts

    def warn_subjects(self) -> None:
        """Emit one :class:`DuplicateSubjectWarning` for conflicts not yet reported."""
        pending = self._subjects.conflicts - self._warned
        if pending > 0:
            warn_duplicate_subjects(pending, self._pending_rows)
        self._warned = self._subjects.conflicts
        self._pending_rows = []

    # -- description, for manifests -------------------------------------------------------------

    def describe(self) -> dict:
        """The release's parameters, as the publishable manifest records them
        (:func:`~postcode_privacy.release.manifest.describe`)."""
        from .manifest import describe

        return describe(self)


class PendingChunk:
    """A chunk checked by :meth:`ReleasePlan.prepare_chunk`, its draws started by
    :meth:`start` and collected by :meth:`wait` (which :meth:`ReleasePlan.finish_chunk`
    calls).  Between the two the caller may prepare the next chunk while the engine's workers
    draw this one; it must wait for this chunk before starting another."""

    def __init__(
        self, plan: ReleasePlan, df: pd.DataFrame, row_offset: int, checked: CheckedRecords
    ):
        self.plan, self.df, self.row_offset, self.checked = plan, df, row_offset, checked
        self.ok = np.flatnonzero(checked.nodes >= 0)
        ids = checked.ids
        ok_ids = ids if self.ok.size == len(ids) else [ids[i] for i in self.ok.tolist()]
        # Accepted records always have a canonical identifier (RecordRules.check_records).
        self.accepted: list[str] = [i for i in ok_ids if i is not None]
        self._draws: Draws | None = None
        self._drawn: np.ndarray | None = None

    def start(self, progress: Callable[[int], None] | None = None) -> None:
        """Start the draws: the single call into the engine for every release path, with node
        numbers and the identifiers canonicalised once by the record checks."""
        if self._draws is not None or self._drawn is not None:
            raise RuntimeError("this chunk's draws have already been started")
        plan = self.plan
        self._draws = draws = start_draws(
            plan.mechanism,
            plan.key,
            self.accepted,
            self.checked.nodes[self.ok],
            brackets=plan._brackets,
            progress=progress,
            profiles=plan.profiles,
            quiet=plan.quiet,
        )
        draws.start()  # workers only once this chunk holds the draws, so cancel() reaches them

    def wait(self) -> np.ndarray:
        """The released node of each accepted record, once drawn (the workers are then gone)."""
        if self._drawn is None:
            if self._draws is None:
                raise RuntimeError("this chunk's draws were never started")
            draws, self._draws = self._draws, None
            self._drawn = draws.result()
        return self._drawn

    def cancel(self) -> None:
        """Stop this chunk's draws if they are under way (for a release that is abandoned)."""
        draws, self._draws = self._draws, None
        if draws is not None:
            draws.cancel()


def checked_row_offset(row_offset: object) -> int:
    """``row_offset`` as the whole number of records before a chunk (0 or more), or
    :class:`InvalidParameterError`: a negative, fractional or boolean offset would make the
    record numbers that errors report name records that do not exist."""
    if (
        isinstance(row_offset, bool)
        or not isinstance(row_offset, numbers.Integral)
        or row_offset < 0
    ):
        raise InvalidParameterError("row_offset must be a whole number of records (0 or more)")
    return int(row_offset)
