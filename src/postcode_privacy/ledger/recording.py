"""Recording a release in the ledger, atomically with its files (docs/ledger.md, "Atomicity").

The protocol, around the release's final renames (``release.files.release_file``):

1. while records are checked, :meth:`LedgerRecorder.screen` computes each releasable record's
   digests, classifies it against the ledger and refuses those the budget does not allow;
2. ``prepare`` (after the output and manifest are complete at their temporary names, before
   any rename): one write transaction re-checks the budget against the ledger as it is now
   (another release may have been recorded meanwhile) and durably records the release as
   ``pending`` with its new draws, the output's final path and sha256;
3. the release renames its files into place;
4. ``commit``: one write transaction marks the release ``committed``.

A crash after 2 and before 4 leaves a pending release that the next command opening the ledger
resolves (:meth:`Ledger.resolve_pending`): committed if the output exists with the recorded
sha256, abandoned (its draws removed, except those another live release also holds) only where
the process resolving it can tell that its run, on that machine and in that PID namespace, has
stopped and no rename began (``owner.py``), else left pending.  A failure before the renames
abandons it at once
(:meth:`finish`).  Pending draws count towards every budget until then, so two releases
recording at once can never both spend the same allowance.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from .._digest import sha256_of_file
from .._file_names import LEDGER_PATH_NOT_UTF8, name_text
from .._interrupts import stop_if_told
from ..errors import SURFACE, InvalidParameterError, KeyFileError, option_name
from ..version import OUTPUT_STABILITY_VERSION
from .accounting import (
    KNOWN_SUBJECT,
    NEW_SUBJECT,
    REPEAT,
    ReleaseAccount,
    budget_from,
    distribution,
    spend_text,
)
from .digests import DrawParameters
from .errors import LedgerDamagedError, LedgerError
from .ledger import Ledger, _damage_is_a_ledger_error, now, owner_tag

if TYPE_CHECKING:
    from ..graph.graph import Graph

__all__ = ["LedgerRecorder", "OVER_BUDGET_REASON"]

OVER_BUDGET_REASON = "the subject's cumulative privacy spend would exceed the budget"


def _reached(stage: str) -> None:
    """Does nothing: the two points of a release ("prepared", "renamed") at which the ledger's
    crash tests replace this function to stop the process (tests/test_ledger.py)."""


def _release_key_option() -> str:
    """Where the release key came from, in the caller's terms."""
    if SURFACE.get() == "cli":
        from ..keyfile import ENV_VAR

        return f"--key, or ${ENV_VAR}"
    return option_name("key")


@dataclass(frozen=True)
class _Binding:
    """What attaching to a release plan fixes for the whole release."""

    params: DrawParameters  # the release-wide conditions of every draw
    epsilon: Fraction
    graph: Graph  # labels the nodes records are released from


@dataclass(frozen=True)
class _PendingEntry:
    """The release's row in the ledger, once ``prepare`` has recorded it."""

    rid: int
    uid: str
    output_path: str  # absolute
    output_sha256: str


class LedgerRecorder:
    """One release's link to a ledger.  Use one recorder per release.

    ``budget``: refuse every record whose new draw would take its subject's cumulative spend
    above it (decimal text, a Decimal, an int, a float read by its shortest text, or a decimal
    Fraction: ``accounting.budget_from``); such a record stops the release, whatever its
    ``on_error`` policy says (``release.records.over_budget_error``).

    States, in order: created; attached (:meth:`attach`); screened (:meth:`start`, called by
    the first screened chunk); pending (:meth:`prepare`); committed (:meth:`commit`).  A step
    taken before the state it needs raises :class:`LedgerError`.
    """

    def __init__(self, ledger: Ledger, budget: object = None):
        if not isinstance(ledger, Ledger):  # (a path, say: Ledger.open makes one)
            raise TypeError(
                "ledger must be an open postcode_privacy.ledger.Ledger (Ledger.open), not "
                + type(ledger).__name__
            )
        self.ledger = ledger
        self._budget = budget_from(budget)  # exact, or refused (never a float)
        self.records = 0
        self._binding: _Binding | None = None
        self._account: ReleaseAccount | None = None
        self._entry: _PendingEntry | None = None
        self._committed = False
        self._commit_tried = False  # commit() began: a later finish() follows its failure

    @property
    def budget(self) -> Fraction | None:
        """The budget, exact (read-only: set only through :func:`accounting.budget_from`)."""
        return self._budget

    @property
    def account(self) -> ReleaseAccount:
        """The current pass's account (state: screened or later)."""
        if self._account is None:
            raise LedgerError("the release was not screened by the ledger")
        return self._account

    def _bound(self) -> _Binding:
        if self._binding is None:
            raise LedgerError("the ledger recorder is not attached to a release plan")
        return self._binding

    # -- step 1: screening --------------------------------------------------------------------

    def attach(self, plan) -> LedgerRecorder:
        """Bind to a :class:`~postcode_privacy.release.ReleasePlan` and become its screen.

        The release key must not be the ledger's secret (:class:`KeyFileError`): the ledger's
        digests are keyed by its secret so that they cannot be linked to the releases without
        it (docs/ledger.md, "What the ledger stores")."""
        if plan.key.fingerprint == self.ledger.digester.fingerprint:
            raise KeyFileError(
                f"the release key ({_release_key_option()}) is the ledger's secret; a release "
                "needs a key of its own (make one with `postcode-privacy keygen`)"
            )
        m = plan.mechanism
        self._binding = _Binding(
            DrawParameters(
                plan.key.fingerprint,
                plan.graph.sha256,
                m.epsilon.text,
                m.radius,
                OUTPUT_STABILITY_VERSION,
            ),
            m.epsilon.fraction,
            plan.graph,
        )
        plan.screen = self.screen
        return self

    def start(self) -> None:
        """Begin a pass over the input (forgetting any earlier pass), on a ledger whose values
        are all of the kinds this package writes (``Ledger.check_integrity``)."""
        self.ledger.check_integrity()
        self._account = ReleaseAccount(self._bound().epsilon, self.budget)
        self.records = 0

    def screen(self, ids: list, nodes: np.ndarray, row_offset: int) -> list[int]:
        """Account one chunk's releasable records; return the positions the budget refuses.

        Contract (``ReleasePlan.check_records``): ``nodes[i] >= 0`` marks a releasable record
        with canonical identifier ``ids[i]``, released from node ``nodes[i]``.  Chunks come in
        input order; a chunk at ``row_offset == 0`` starts a new pass over the input, so a
        validation pass followed by the release pass is accounted once.
        """
        if row_offset == 0:
            self.start()
        account = self.account
        binding = self._bound()
        self.records += len(nodes)
        ok = np.flatnonzero(nodes >= 0).tolist()
        if not ok:
            return []
        label = binding.graph.label
        subjects, pairs, draws = self.ledger.digester.digests(
            binding.params, [ids[i] for i in ok], [label(int(nodes[i])) for i in ok]
        )
        fresh = account.needs(subjects)
        known, pending, spend = self.ledger.lookup(draws, fresh)
        account.load(known, spend, fresh, pending)
        classify = account.classify
        return [i for i, s, p, d in zip(ok, subjects, pairs, draws) if not classify(s, p, d)]

    # -- steps 2 and 4: pending, then committed -----------------------------------------------

    def prepare(self, output_path: str | os.PathLike, output_sha256: str) -> None:
        """Record the release as pending (durably), re-checking the budget first."""
        stop_if_told()  # a stop Python dropped on the way: nothing is recorded
        account = self.account
        p = self._bound().params
        store = self.ledger.store
        uid = secrets.token_hex(16)
        path = os.path.abspath(output_path)
        recorded = name_text(path)  # (the same text under any locale: _file_names.py)
        if recorded is None:  # (refused before any work: release/files.py)
            raise InvalidParameterError(LEDGER_PATH_NOT_UTF8)
        new = account.new_draws + account.borrowed
        with store.write(), _damage_is_a_ledger_error(store):
            if self.budget is not None and new:
                self._recheck_budget(account, self.budget)
            rid = (store.query("SELECT COALESCE(MAX(id), 0) FROM releases")[0][0] or 0) + 1
            store.execute(
                "INSERT INTO releases (id, uid, state, created, owner, output_path, "
                "output_sha256, epsilon, radius, graph_sha256, key_fingerprint, "
                "output_stability_version, records, new_draws, budget) "
                "VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    rid,
                    uid,
                    now(),
                    owner_tag(path),
                    recorded,
                    output_sha256,
                    p.epsilon,
                    p.radius,
                    p.graph_sha256,
                    p.key_fingerprint,
                    p.output_stability_version,
                    self.records,
                    len(account.new_draws),
                    None if self.budget is None else str(self.budget),
                ),
            )
            added = self.ledger._record_rows(rid, new)
            if added != len(account.new_draws):
                store.execute("UPDATE releases SET new_draws = ? WHERE id = ?", (added, rid))
        self._entry = _PendingEntry(rid, uid, path, output_sha256)
        _reached("prepared")

    def _recheck_budget(self, account: ReleaseAccount, budget: Fraction) -> None:
        """Inside the write transaction: would any subject now exceed the budget?"""
        if self._over_budget(account, budget):
            raise self.spent_meanwhile()

    @staticmethod
    def spent_meanwhile() -> LedgerError:
        """The error for a release that a release recorded since its check pass takes over
        the budget: its records were within it when checked (docs/ledger.md, "Budgets")."""
        return LedgerError(
            "another release recorded in the ledger since this one was checked would "
            "take some subjects over the budget; nothing was released, run it again"
        )

    def _over_budget(self, account: ReleaseAccount, budget: Fraction) -> bool:
        """Inside a write transaction: would recording this release's draws now take any
        subject over ``budget``, against the ledger as it is (docs/ledger.md, "Budgets")?"""
        rows = account.new_draws + account.borrowed
        known, _, spend = self.ledger.lookup_in_transaction(
            (d for d, _, _ in rows), {s for _, s, _ in rows}
        )
        added: dict[bytes, int] = {}
        for draw, subject, _ in rows:
            if draw not in known:
                added[subject] = added.get(subject, 0) + 1
        return any(
            spend.get(subject, 0) + count * account.epsilon > budget
            for subject, count in added.items()
        )

    def commit(self) -> None:
        """Mark the (now renamed) release committed (state: pending).

        If another process abandoned the entry meanwhile, the files are in place all the same,
        so the draws are recorded again and the release committed; if the budget, checked
        again against the ledger as it now is, no longer allows them, that truth is recorded
        and then :class:`LedgerError` says the budget was exceeded (docs/ledger.md,
        "Atomicity")."""
        entry = self._entry
        if entry is None:
            raise LedgerError("the release was not recorded in the ledger before its renames")
        _reached("renamed")
        self._commit_tried = True
        store = self.ledger.store
        budget, over_budget, removed = self.budget, False, False
        try:
            with store.write(), _damage_is_a_ledger_error(store):
                state = store.query(
                    "SELECT state FROM releases WHERE id = ? AND uid = ?", (entry.rid, entry.uid)
                )
                if state and state[0][0] == "abandoned":
                    # Another process judged this release dead before its renames (it should
                    # not: this process is alive; a clone of this machine or an edit by hand
                    # could).  The files exist now, so the draws count, whatever the budget
                    # says.
                    account = self.account
                    rows = account.new_draws + account.borrowed
                    over_budget = (
                        budget is not None and bool(rows) and self._over_budget(account, budget)
                    )
                    added = self.ledger._record_rows(entry.rid, rows)
                    store.execute(
                        "UPDATE releases SET new_draws = ? WHERE id = ?", (added, entry.rid)
                    )
                    state = [("pending",)]
                if state and state[0][0] == "pending":
                    self.ledger._commit_rows(entry.rid)
                removed = not state
        except LedgerDamagedError as exc:
            # A backup holds no entry of this release: said, or restoring one would lose it.
            raise LedgerDamagedError(
                f"the release's files are in place, but {exc}: the backup will not hold this "
                f"release; once it is restored, run this release again with "
                f"{option_name('force')} to record it (the same inputs and key give the same "
                "draws)"
            ) from None
        except LedgerError as exc:  # the ledger's surroundings (a full disk, a lost server)
            raise LedgerError(
                f"the release's files are in place, but {exc}; its ledger entry may still be "
                "pending, counting against budgets until the ledger is next opened and settles "
                'it (docs/ledger.md, "Atomicity")'
            ) from None
        if removed:
            raise LedgerError(
                "the ledger entry of this release was removed while it was "
                "being written; run `postcode-privacy ledger show` to check"
            )
        self._committed = True
        if over_budget and budget is not None:
            raise LedgerError(
                f"release #{entry.rid} exceeds the budget ({option_name('budget')} "
                f"{spend_text(budget)}): its files are in place and its draws are "
                "recorded in the ledger, but its entry had been abandoned while it was being "
                "written, and releases recorded meanwhile take some of its subjects over the "
                "budget with it; run `postcode-privacy ledger show` to see the spend"
            )

    def finish(self, *, wait: bool = True) -> None:
        """After success or failure: settle this release's entry if it is still pending.

        ``wait=False`` (a run told to stop) settles it only if no other run holds the write
        lock: a stop must not wait again for the lock whose wait it just ended (a hostile
        review: Ctrl-C during the commit's wait then waited up to ten minutes on SQLite, and
        for ever on PostgreSQL).  Nor does a release whose :meth:`commit` failed (its wait for
        the lock timed out, say): waiting again would double the wait, to say the same."""
        entry = self._entry
        if entry is None or self._committed:
            return
        wait = wait and not self._commit_tried
        # Only a failed release gets here, and its error is the one to report: an entry that
        # cannot be settled now (a full disk, a lost server, a lock held elsewhere) stays
        # pending, for the next opening of the ledger to settle (docs/ledger.md, "Atomicity").
        store = self.ledger.store
        with (
            contextlib.suppress(LedgerError),
            store.write(wait=wait),
            _damage_is_a_ledger_error(store),
        ):
            state = store.query("SELECT state FROM releases WHERE id = ?", (entry.rid,))
            if not state or state[0][0] != "pending":
                return
            if (
                os.path.isfile(entry.output_path)
                and sha256_of_file(entry.output_path) == entry.output_sha256
            ):
                self.ledger._commit_rows(entry.rid)
            else:
                self.ledger._abandon_rows(entry.rid)

    # -- the preview --------------------------------------------------------------------------

    def report(self) -> dict:
        """What this release would do to the ledger (``ledger check``)."""
        account = self.account
        after = account.spend_after()
        known_after = [v for s, v in after.items() if account.base[s] > 0]
        return {
            "records": self.records,
            "releasable": sum(account.records.values()),
            "repeats": account.records[REPEAT],
            "new_draws_of_known_subjects": account.records[KNOWN_SUBJECT],
            "new_subjects_records": account.records[NEW_SUBJECT],
            "over_budget": account.records["over_budget"],
            "new_draws": len(account.new_draws),
            "known_subjects_drawn_again": len(known_after),
            "new_subjects": len(after) - len(known_after),
            "spend_after_known": distribution(known_after),
            "spend_after_all_drawn": distribution(after.values()),
        }
