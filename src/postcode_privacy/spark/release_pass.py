"""The release pass: a lazy ``mapInArrow`` that hands each partition, chunk by chunk, to
``ReleasePlan.process_chunk``.

Its closure holds only small values (the task spec, the sealed key, the partitions' record
offsets, the column names), never the graph.  The columns cross ``mapInArrow`` under positional
names, since Spark parses the names there, and all but the two the release reads stay Arrow
from input to output, never passing through pandas.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from ..errors import InputDataError
from ..release.options import ReleaseOptions
from .columns import _positional, _positional_input
from .shipping import _SealedKey
from .tasks import (
    _engine_workers,
    _partition_id,
    _records_frame,
    _task_cpus,
    _TaskSpec,
    _worker_plan,
)

RELEASE_CHUNK = 50_000  # records handed to process_chunk at once (Arrow batches are 10,000)


def _chunks(batches, size: int):
    """Arrow record batches regrouped into tables of at least ``size`` records (the last may be
    smaller), in order.  Larger chunks change no output, only the engine's speed: it shares
    work between records of one postcode and, above a few thousand distinct postcodes per
    call, uses its landmark tables (docs/spark.md, "Performance")."""
    pending, count = [], 0
    for batch in batches:
        pending.append(batch)
        count += batch.num_rows
        if count >= size:
            yield pa.Table.from_batches(pending)
            pending, count = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


def _release_partition(
    spec: _TaskSpec,
    sealed: _SealedKey,
    offsets: list[int],
    batches,
    names: list[str],
    chunk: int = RELEASE_CHUNK,
):
    """Release one partition, chunk by chunk, through ``ReleasePlan.process_chunk``.

    The batches arrive as Arrow record batches under positional names (:func:`_release_frame`),
    and leave as Arrow: only the identifier and the true postcode are handed to
    ``process_chunk`` as pandas; every other column goes from input to output as Arrow, never
    through pandas, which would turn a NaN into a null and refuse a timestamp outside
    1677-2262.  The output holds the rows ``process_chunk`` kept, in order, each column but
    the true postcode (kept with ``keep_source_postcode``), then the released postcode.
    """
    options = spec.options
    plan = _worker_plan(spec, sealed.open())
    partition = _partition_id()
    offset = offsets[partition] if partition < len(offsets) else 0
    cpus = _task_cpus()
    kept_columns = [
        i
        for i, name in enumerate(names)
        if options.keep_source_postcode or name != options.postcode_column
    ]
    out_names = _positional("o", len(kept_columns) + 1)
    seen = 0
    for table in _chunks(batches, chunk):
        records = _records_frame(table, names, options, seen)
        try:
            with _engine_workers(cpus):
                out, _ = plan.process_chunk(records, offset + seen, warn=False)
        except InputDataError as exc:
            # Only reachable if the input changed after the check pass had accepted it; the
            # message crosses to the driver as text, which lists the records (InputDataError).
            raise InputDataError(
                f"{exc.summary} (found while releasing partition {partition}: the "
                "input changed after the check pass; record numbers assume the check pass's "
                "partitioning)",
                exc.row_errors,
                exc.total_errors,
            ) from None
        seen += table.num_rows
        rows = pa.array(out.index.to_numpy(dtype=np.int64))  # kept rows (all but dropped)
        released = pa.array(out[options.out_column].tolist(), type=pa.string())
        columns = [table.column(i).take(rows) for i in kept_columns] + [released]
        yield from pa.Table.from_arrays(columns, names=out_names).to_batches()


def _output_fields(df: DataFrame, options: ReleaseOptions) -> list[StructField]:
    fields = [
        f
        for f in df.schema.fields
        if options.keep_source_postcode or f.name != options.postcode_column
    ]
    return fields + [StructField(options.out_column, StringType(), True)]


def _release_function(
    spec: _TaskSpec,
    sealed: _SealedKey,
    offsets: list[int],
    names: list[str],
    chunk: int = RELEASE_CHUNK,
):
    """The function ``mapInArrow`` runs; its closure holds only small values (no graph)."""

    def postcode_privacy_release(batches):
        return _release_partition(spec, sealed, offsets, batches, names, chunk)

    return postcode_privacy_release


def _release_frame(
    df: DataFrame,
    spec: _TaskSpec,
    sealed: _SealedKey,
    offsets: list[int],
    chunk: int = RELEASE_CHUNK,
) -> DataFrame:
    """The release pass, lazily.  Spark parses the column names at a ``mapInArrow``, so a
    name holding a dot or a backtick would fail there: the columns cross it under positional
    names and get their own back on both sides (issue 14, item 4)."""
    names = list(df.columns)
    fields = _output_fields(df, spec.options)
    positional = _positional_input(df)
    schema = StructType(
        [
            StructField(alias, f.dataType, f.nullable)
            for f, alias in zip(fields, _positional("o", len(fields)))
        ]
    )
    released = positional.mapInArrow(_release_function(spec, sealed, offsets, names, chunk), schema)
    # Each column gets its metadata back too (comments, ML attributes): the positional
    # aliases would otherwise leave every column of the release without it.
    return released.select(
        *[
            F.col(alias).alias(f.name, metadata=f.metadata)
            for f, alias in zip(fields, _positional("o", len(fields)))
        ]
    )
