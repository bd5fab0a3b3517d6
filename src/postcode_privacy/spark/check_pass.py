"""The check pass: one Spark job that applies the input rules to every record, before any release.

Each partition reports its counts, its first failing records and its distinct (identifier hash,
true postcode) pairs; one shuffle by identifier hash finds identifiers seen with two postcodes;
the driver merges the partitions' summaries, in partition order, into a :class:`SparkCheck`
with global, 1-based record numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..errors import InputDataError
from ..mechanism.keys import Key
from ..release.records import MAX_LISTED_ERRORS, ChunkCheck, failure_error
from ..release.subjects import subject_hash
from .columns import _positional, _positional_input
from .executors import _library_error
from .tasks import _partition_id, _records_frame, _TaskSpec, _worker_plan

_MAX_CONFLICT_ROWS = 5  # record numbers quoted in a duplicate-subject warning, as perturb_frame

# Schema of the check pass: one row per partition (summary ``s`` set) and one row per distinct
# (identifier hash, true postcode) pair of a partition (``h``, ``c`` and its first record ``r``).
_CHECK_SCHEMA = "p int, r long, h long, c long, s string"
_CHECK_ARROW = pa.schema(
    [("p", pa.int32()), ("r", pa.int64()), ("h", pa.int64()), ("c", pa.int64()), ("s", pa.string())]
)
_CHECK_ID, _CHECK_POSTCODE = "id", "postcode"  # the two columns the check pass reads, renamed
_CHECK_OUT = "released"


def _accepted_hash(subject: str | None) -> int:
    """``subject_hash`` of an accepted record's identifier: check_records gives every record it
    accepts (node >= 0) its canonical identifier, and None to the others."""
    if subject is None:
        raise AssertionError("an accepted record has no identifier")
    return subject_hash(subject)


def _check_partition(spec: _TaskSpec, batches):
    """Apply the input rules to one partition: yield its summary and its (subject, postcode) pairs.

    Record numbers here are 1-based within the partition; the driver adds the partition's offset.
    No key is involved: the plan is built with a throwaway key and never draws.
    """
    plan = _worker_plan(spec, Key.generate())
    partition = _partition_id()
    check = ChunkCheck()
    seen = 0
    for batch in batches:
        checked = plan.check_records(batch, seen)
        check.merge(checked.check)
        ok = np.flatnonzero(checked.nodes >= 0)
        if ok.size:
            hashes = np.fromiter(
                (_accepted_hash(checked.ids[i]) for i in ok.tolist()),
                dtype=np.uint64,
                count=ok.size,
            ).view(np.int64)
            pairs = pd.DataFrame(
                {"h": hashes, "c": checked.nodes[ok], "r": ok.astype(np.int64) + seen + 1}
            )
            pairs = pairs.drop_duplicates(["h", "c"], keep="first")
            yield pd.DataFrame(
                {
                    "p": np.full(len(pairs), partition, dtype=np.int32),
                    "r": pairs["r"].to_numpy(),
                    "h": pairs["h"].to_numpy(),
                    "c": pairs["c"].to_numpy(),
                    "s": None,
                }
            )
        seen += len(batch)
    summary = json.dumps({"p": partition, "counts": check.counts, "errors": check.row_errors})
    yield pd.DataFrame({"p": [partition], "r": [None], "h": [None], "c": [None], "s": [summary]})


@dataclass
class SparkCheck:
    """What the check pass found in a Spark DataFrame.

    ``counts`` has the keys of ``perturb_frame``'s counts (``COUNT_KEYS`` plus
    ``identifiers_with_several_postcodes``); ``row_errors`` lists the first
    :data:`MAX_LISTED_ERRORS` failing records as ``(record number, reason)`` with global 1-based
    numbers; ``partition_records`` is the number of records in each partition, in partition order;
    ``conflict_rows`` are the record numbers (at most five) at which an identifier is first seen
    with a second postcode.
    """

    counts: dict[str, int]
    row_errors: list[tuple[int, str]]
    partition_records: list[int]
    conflict_rows: list[int] = field(default_factory=list)
    terminated: str = "error"  # the policy checked under, which the error's advice follows

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)

    @property
    def offsets(self) -> list[int]:
        """Records before each partition, in partition order."""
        return _offsets(self.partition_records)

    def error(self) -> InputDataError | None:
        """The error ``perturb_frame`` raises for these failures under ``on_error="error"``,
        or None when no record failed (``perturb_frame`` raises nothing then)."""
        if not self.failed:
            return None
        return failure_error(self.row_errors, self.counts, terminated=self.terminated)


def _offsets(records: list[int]) -> list[int]:
    out, total = [], 0
    for n in records:
        out.append(total)
        total += n
    return out


def _run_check(df: DataFrame, spec: _TaskSpec) -> SparkCheck:
    """One Spark job: the check pass, merged on the driver in partition order."""
    options = spec.options
    # The pass reads the two columns under fixed names; it writes no output column, so that
    # name only has to differ from them.
    renamed = replace(
        spec,
        options=options.replace(
            id_column=_CHECK_ID, postcode_column=_CHECK_POSTCODE, out_column=_CHECK_OUT
        ),
    )

    # Every column, as the release pass reads them (``_positional_input``): only the two are
    # judged, but reading the same columns makes Spark number the records alike.
    columns = list(df.columns)
    aliases = _positional("c", len(columns))
    read = [
        aliases[columns.index(options.id_column)],
        aliases[columns.index(options.postcode_column)],
    ]

    def postcode_privacy_check(batches):
        # Arrow in and out (``mapInArrow``), the records read as the release pass reads them
        # (``_records_frame``), so that both passes judge every record alike.
        names = [_CHECK_ID, _CHECK_POSTCODE]

        def frames():
            seen = 0
            for batch in batches:
                table = pa.Table.from_batches([batch]).select(read).rename_columns(names)
                yield _records_frame(table, names, renamed.options, seen)
                seen += table.num_rows

        for found in _check_partition(renamed, frames()):
            yield pa.RecordBatch.from_pandas(found, schema=_CHECK_ARROW, preserve_index=False)

    pre = _positional_input(df).mapInArrow(postcode_privacy_check, _CHECK_SCHEMA)
    # One shuffle, by identifier hash.  Each identifier's (partition, record, postcode) triples
    # sort into record order; the conflict shows at the first record whose postcode differs from
    # the first one's, as in perturb_frame.  The partition summaries all fall in the null group.
    per_subject = pre.groupBy("h").agg(
        F.sort_array(F.collect_list(F.struct("p", "r", "c"))).alias("seen"),
        F.collect_list("s").alias("s"),
    )
    others = F.filter("seen", lambda x: x["c"] != F.col("seen")[0]["c"])
    conflict = F.col("h").isNotNull() & (F.size(others) > 0)
    final = per_subject.agg(
        F.flatten(F.collect_list(F.when(F.col("h").isNull(), F.col("s")))).alias("summaries"),
        F.sum(F.when(conflict, 1).otherwise(0)).alias("conflicts"),
        F.sort_array(F.collect_list(F.when(conflict, others[0]))).alias("conflict_at"),
    )
    try:
        row = final.collect()[0]
    except Exception as exc:  # Spark's wrapper of whatever a Python worker raised
        raised = _library_error(exc)
        if raised is None:
            raise
        raise raised from None

    summaries = sorted((json.loads(s) for s in (row["summaries"] or [])), key=lambda s: s["p"])
    n_partitions = summaries[-1]["p"] + 1 if summaries else 0
    records = [0] * n_partitions
    for s in summaries:
        records[s["p"]] = s["counts"]["records"]
    offsets = _offsets(records)
    merged = ChunkCheck()
    for s in summaries:
        part = ChunkCheck(
            counts=dict(s["counts"]),
            row_errors=[(offsets[s["p"]] + int(r), reason) for r, reason in s["errors"]],
        )
        merged.merge(part)
    counts = merged.counts
    counts["identifiers_with_several_postcodes"] = int(row["conflicts"] or 0)
    conflict_rows = [offsets[c["p"]] + int(c["r"]) for c in (row["conflict_at"] or [])]
    return SparkCheck(
        counts=counts,
        row_errors=merged.row_errors[:MAX_LISTED_ERRORS],
        partition_records=records,
        conflict_rows=sorted(conflict_rows)[:_MAX_CONFLICT_ROWS],
        terminated=spec.options.terminated,
    )
