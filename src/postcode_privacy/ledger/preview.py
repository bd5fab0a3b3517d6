"""``ledger check``: what a release would do to the ledger, without making it."""

from __future__ import annotations

import os
from typing import Any

from ..release.options import DEFAULT_CHUNK_SIZE, ReleaseOptions
from .ledger import Ledger
from .recording import LedgerRecorder

__all__ = ["check_release"]


def check_release(
    ledger: Ledger,
    input_path: str | os.PathLike,
    *,
    key,
    graph=None,
    options: ReleaseOptions | None = None,
    terminated_locations=None,
    budget: object = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    **option_kwargs: Any,
) -> dict:
    """Classify every releasable record of ``input_path`` against ``ledger`` (nothing is
    perturbed and nothing is written); return :meth:`LedgerRecorder.report` plus the count of
    records that cannot be released at all (``unreleasable``).

    The release previewed is described as :func:`~postcode_privacy.release.release_file`'s:
    ``options``, or its fields as keyword arguments.  Its ``on_error`` does not matter here: a
    record that cannot be released is counted, not an error."""
    from ..release.plan import ReleasePlan
    from ..release.reader import TableReader

    options = ReleaseOptions.build(options, **option_kwargs).replace(on_error="null")
    reader = TableReader(input_path, chunk_size)
    plan = ReleasePlan(
        key=key, options=options, graph=graph, terminated_locations=terminated_locations
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
