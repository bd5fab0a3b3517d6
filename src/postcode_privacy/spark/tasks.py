"""What every task of either pass does on its executor before it checks or releases a record.

The driver sends a :class:`_TaskSpec` (never the key); the task rebuilds the driver's
:class:`ReleasePlan` from it, runs the engine on the CPUs Spark gave it, and reads its records
with :func:`_records_frame`, one reading for both passes so that both judge every record alike.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
from pyspark import TaskContext

from ..engine.batch import WORKERS_ENV
from ..errors import InputDataError, InvalidParameterError, TeleportWarning
from ..mechanism.keys import Key
from ..release.options import ReleaseOptions
from ..release.plan import ReleasePlan
from ..release.reader import first_invalid_record
from ..release.records import never_usable
from .shipping import _GraphRef, _worker_graph


@dataclass(frozen=True)
class _TaskSpec:
    """Everything a worker needs to rebuild the driver's plan, except the key: the shipped
    graph, the release options (a :class:`ReleaseOptions`, which pickles as plain values) and
    the radius the driver resolved, checked again on the worker."""

    graph: _GraphRef
    options: ReleaseOptions
    expected_radius: int


def _worker_plan(spec: _TaskSpec, key: Key) -> ReleasePlan:
    graph = _worker_graph(spec.graph)
    with warnings.catch_warnings():
        # An explicit radius short of the teleport target was already reported on the driver.
        warnings.simplefilter("ignore", TeleportWarning)
        plan = ReleasePlan(key=key, options=spec.options, graph=graph)
    plan.profiles = "cached"  # use the profile table if this machine has it; never build it here
    if plan.mechanism.radius != spec.expected_radius:
        raise InvalidParameterError("the radius on this executor differs from the driver's")
    return plan


@contextlib.contextmanager
def _engine_workers(count: int):
    """Run the sampling engine on ``count`` processes while the block runs (then restore).

    Spark already runs one Python worker per task slot; left to its default, the engine would
    fork a process per CPU inside every one of them.  ``count`` is the CPUs Spark gave the task
    (``spark.task.cpus``, 1 unless configured).
    """
    previous = os.environ.get(WORKERS_ENV)
    os.environ[WORKERS_ENV] = str(max(1, count))
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(WORKERS_ENV, None)
        else:
            os.environ[WORKERS_ENV] = previous


def _task_cpus() -> int:
    context = TaskContext.get()
    try:
        return int(context.cpus()) if context is not None else 1
    except (AttributeError, TypeError, ValueError):  # older PySpark: no resource information
        return 1


def _partition_id() -> int:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("not running inside a Spark task")
    return context.partitionId()


def _records_frame(
    table: pa.Table, names: list[str], options: ReleaseOptions, first: int
) -> pd.DataFrame:
    """The two columns a release reads (identifier and true postcode), under their own names,
    as pandas, with a 0-based index: only these cross into pandas.  Integers keep every digit
    (pandas' nullable integers, not float64) and text stays text.

    Spark does not check that text is UTF-8 (a Parquet file's bytes, a cast from binary), and
    pyarrow's conversion would fail quoting the bad value: such a record is refused first,
    named by its place in the partition (``first`` records precede the table), never quoted."""
    columns = {}
    for role, name in (("identifier", options.id_column), ("postcode", options.postcode_column)):
        column = table.column(names.index(name))
        bad = first_invalid_record(column)
        if bad is not None:
            raise InputDataError(
                f"record {first + bad + 1} of Spark partition {_partition_id()}: its {role} "
                "is text that is not valid UTF-8"
            )
        columns[name] = column.to_pandas(types_mapper=_exact_pandas_type)
    return pd.DataFrame(columns)


def _exact_pandas_type(kind: pa.DataType):
    # Integers keep every digit; a type no identifier or postcode has stays Arrow, for the
    # record rules to refuse by record (records.cells_of): pyarrow's conversion to Python
    # fails on a date past 9999, quoting its year.
    if pa.types.is_integer(kind) or never_usable(kind):
        return pd.ArrowDtype(kind)
    return None  # pyarrow's own conversion (text as str, the rest as it always is)
