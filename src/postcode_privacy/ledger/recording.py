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
sha256, abandoned (its draws removed, except those another live release also holds) if not.  A failure before the renames abandons it at once
(:meth:`finish`).  Pending draws count towards every budget until then, so two releases
recording at once can never both spend the same allowance.
"""

from __future__ import annotations

import os
import secrets
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from ..version import OUTPUT_STABILITY_VERSION
from .accounting import KNOWN_SUBJECT, NEW_SUBJECT, REPEAT, ReleaseAccount, distribution
from .digests import DrawParameters
from .errors import LedgerError
from .ledger import Ledger, now, owner_tag, sha256_file

__all__ = ["LedgerRecorder", "OVER_BUDGET_REASON", "TEST_PAUSE_ENV"]

OVER_BUDGET_REASON = "the subject's cumulative privacy spend would exceed the budget"
# Test hook: "STAGE:PATH" makes a release stop at STAGE ("prepared" or "renamed"), create PATH
# and sleep, so that a test can kill the process exactly there.
TEST_PAUSE_ENV = "POSTCODE_PRIVACY_LEDGER_TEST_PAUSE"


def _pause_for_tests(stage: str) -> None:
    spec = os.environ.get(TEST_PAUSE_ENV)
    if spec and spec.partition(":")[0] == stage:
        Path(spec.partition(":")[2]).touch()
        time.sleep(3600)


class LedgerRecorder:
    """One release's link to a ledger.  Use one recorder per release.

    ``budget``: refuse (as a failing record, handled by the release's ``on_error`` policy)
    every record whose new draw would take its subject's cumulative spend above it.
    """

    def __init__(self, ledger: Ledger, budget: Fraction | None = None):
        self.ledger = ledger
        self.budget = budget
        self.account: ReleaseAccount | None = None
        self.params: DrawParameters | None = None
        self.records = 0
        self._graph = None
        self._rid: int | None = None
        self._uid: str | None = None
        self._committed = False

    # -- step 1: screening --------------------------------------------------------------------

    def attach(self, plan) -> LedgerRecorder:
        """Bind to a :class:`~postcode_privacy.release.ReleasePlan` and become its screen."""
        m = plan.mechanism
        self.params = DrawParameters(plan.key.fingerprint, plan.graph.sha256, m.epsilon.text,
                                     m.radius, OUTPUT_STABILITY_VERSION)
        self.epsilon = m.epsilon.fraction
        self._graph = plan.graph
        plan.screen = self.screen
        return self

    def start(self) -> None:
        """Begin a pass over the input (forgetting any earlier pass)."""
        self.account = ReleaseAccount(self.epsilon, self.budget)
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
        self.records += len(nodes)
        ok = np.flatnonzero(nodes >= 0).tolist()
        if not ok:
            return []
        label = self._graph.label
        subjects, pairs, draws = self.ledger.digester.digests(
            self.params, [ids[i] for i in ok], [label(int(nodes[i])) for i in ok])
        fresh = account.needs(subjects)
        known, pending, spend = self.ledger.lookup(draws, fresh)
        account.load(known, spend, fresh, pending)
        classify = account.classify
        return [i for i, s, p, d in zip(ok, subjects, pairs, draws) if not classify(s, p, d)]

    # -- steps 2 and 4: pending, then committed -----------------------------------------------

    def prepare(self, output_path: str | os.PathLike, output_sha256: str) -> None:
        """Record the release as pending (durably), re-checking the budget first."""
        account = self.account
        if account is None:
            raise LedgerError("the release was not screened by the ledger")
        store = self.ledger.store
        self._uid = secrets.token_hex(16)
        new = account.new_draws + account.borrowed
        with store.write():
            if self.budget is not None and new:
                self._recheck_budget()
            rid = (store.query("SELECT COALESCE(MAX(id), 0) FROM releases")[0][0] or 0) + 1
            p = self.params
            store.execute(
                "INSERT INTO releases (id, uid, state, created, owner, output_path, "
                "output_sha256, epsilon, radius, graph_sha256, key_fingerprint, "
                "output_stability_version, records, new_draws, budget) "
                "VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (rid, self._uid, now(), owner_tag(), os.path.abspath(output_path), output_sha256,
                 p[2], p[3], p[1], p[0], p[4], self.records, len(account.new_draws),
                 None if self.budget is None else str(self.budget)))
            added = self.ledger._record_rows(rid, new)
            if added != len(account.new_draws):
                store.execute("UPDATE releases SET new_draws = ? WHERE id = ?", (added, rid))
        self._rid = rid
        self._output = (os.path.abspath(output_path), output_sha256)
        _pause_for_tests("prepared")

    def _recheck_budget(self) -> None:
        """Inside the write transaction: would any subject now exceed the budget?"""
        account = self.account
        rows = account.new_draws + account.borrowed
        known, _, spend = self.ledger.lookup_in_transaction(
            (d for d, _, _ in rows), {s for _, s, _ in rows})
        added: dict[bytes, int] = {}
        for draw, subject, _ in rows:
            if draw not in known:
                added[subject] = added.get(subject, 0) + 1
        for subject, count in added.items():
            if spend.get(subject, 0) + count * self.epsilon > self.budget:
                raise LedgerError(
                    "another release recorded in the ledger since this one was checked would "
                    "take some subjects over the budget; nothing was released, run it again")

    def commit(self) -> None:
        """Mark the (now renamed) release committed."""
        _pause_for_tests("renamed")
        store = self.ledger.store
        with store.write():
            state = store.query("SELECT state FROM releases WHERE id = ? AND uid = ?",
                                (self._rid, self._uid))
            if state and state[0][0] == "abandoned":
                # Another process judged this release dead before its renames (possible only
                # across machines, after the grace period): the files exist now, so restore.
                self.ledger._record_rows(self._rid,
                                         self.account.new_draws + self.account.borrowed)
                state = [("pending",)]
            if state and state[0][0] == "pending":
                self.ledger._commit_rows(self._rid)
            elif not state:
                raise LedgerError("the ledger entry of this release was removed while it was "
                                  "being written; run `postcode-privacy ledger show` to check")
        self._committed = True

    def finish(self) -> None:
        """After success or failure: settle this release's entry if it is still pending."""
        if self._rid is None or self._committed:
            return
        path, sha = self._output
        store = self.ledger.store
        with store.write():
            state = store.query("SELECT state FROM releases WHERE id = ?", (self._rid,))
            if not state or state[0][0] != "pending":
                return
            if os.path.isfile(path) and sha256_file(path) == sha:
                self.ledger._commit_rows(self._rid)
            else:
                self.ledger._abandon_rows(self._rid)

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
