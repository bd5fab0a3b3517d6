"""``ledger check``: what a release would do to the ledger, without making it."""

from __future__ import annotations

import os

from .ledger import Ledger
from .recording import LedgerRecorder

__all__ = ["check_release"]


def check_release(
    ledger: Ledger,
    input_path: str | os.PathLike,
    *,
    key,
    epsilon,
    id_column: str,
    postcode_column: str,
    graph=None,
    radius: int | None = None,
    terminated: str = "error",
    terminated_locations=None,
    budget: object = None,
    chunk_size: int = 100_000,
) -> dict:
    """Classify every releasable record of ``input_path`` against ``ledger`` (nothing is
    perturbed and nothing is written); return :meth:`LedgerRecorder.report` plus the count of
    records that cannot be released at all (``unreleasable``)."""
    from ..release.plan import ReleasePlan
    from ..release.reader import TableReader

    reader = TableReader(input_path, chunk_size)
    plan = ReleasePlan(
        key=key,
        epsilon=epsilon,
        id_column=id_column,
        postcode_column=postcode_column,
        graph=graph,
        radius=radius,
        on_error="null",
        terminated=terminated,
        terminated_locations=terminated_locations,
    )
    reader.check_columns(plan.options)
    recorder = LedgerRecorder(ledger, budget).attach(plan)
    offset = 0
    unreleasable = 0
    recorder.start()  # an input without records still gets a report
    for chunk in reader.chunks():
        counts = plan.check_records(chunk, offset).check.counts
        unreleasable += counts["failed"] - counts["over_budget"]
        offset += len(chunk)
    report = recorder.report()
    report["unreleasable"] = unreleasable
    return report
