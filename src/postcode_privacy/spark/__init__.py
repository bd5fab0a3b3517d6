"""Releasing a Spark DataFrame: the release recipe run on every partition with ``mapInArrow``.

The user guide is docs/spark.md.  Nothing here decides an output.  Each partition is handed, in
chunks of its Arrow batches, to :meth:`ReleasePlan.process_chunk`, the function behind
``perturb_frame`` and the ``perturb`` command, and every released postcode depends only on its
own record (key, subject, postcode, graph, epsilon, radius).  So the released column equals
``perturb_frame``'s for the same records, whatever the partitioning.

How a release runs (:func:`perturb`, here; each step names the module that takes it):

1. On the driver, the key's type, the options (:class:`ReleaseOptions`) and the columns are
   checked (the column types and names Spark would trip on: ``columns.py``), then the graph is
   resolved (``None`` is the national graph's cached artefact, a path is an artefact file, and a
   :class:`Graph` object is saved once to a temporary artefact: ``shipping.py``) and a
   :class:`ReleasePlan` is built, which checks the other options.  So bad options fail before
   any Spark job.
2. A one-row probe job (``executors.py``) checks that the executors' Python imports this package
   at the driver's output-stability version (else :class:`ExecutorEnvironmentError`, naming
   ``PYSPARK_PYTHON``).  The artefact is shipped to the executors once (``shipping.py``), as a
   file (``SparkContext.addFile``; on Spark Connect
   ``SparkSession.addArtifacts(..., file=True)``), under a name derived from its sha256.  Each
   Python worker loads it at most once (``SparkFiles.get``, memory-mapped), checks that its
   content hash is the driver's, and keeps it in a module-level cache keyed by that hash.  The
   graph is never pickled into a task.
3. A check pass (``check_pass.py``: one Spark job, no draws and no key) applies the input rules
   to every record, counts the records of each partition, and looks for identifiers seen with
   two postcodes.  Record numbers are global and 1-based: partition ``p``'s records are numbered
   after those of partitions ``0 .. p - 1``, in the order Spark reads them.  With
   ``on_error="error"`` any failing record raises :class:`InputDataError` here, on the driver,
   with the same message and listed records as ``perturb_frame``.
4. The release pass (``release_pass.py``) is returned as a lazy DataFrame; it runs when an
   action (write, collect) needs it.  Rows keep their order within and across partitions.

A task of either pass rebuilds the driver's plan on its executor and reads its records the same
way (``tasks.py``), so that both passes judge every record alike.

The key travels only inside the task closure, as its key-file bytes held by an object with a
withheld repr (``shipping.py``): it is never a Column literal, a configuration value or a file,
so it does not appear in ``explain()``, the SQL plan, the Spark UI or the event log.  The closure
itself goes from driver to executors over Spark's RPC channel: see docs/spark.md, "The key", for
the settings that encrypt it.
"""

from __future__ import annotations

from typing import Any

try:
    from pyspark.sql import DataFrame
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "postcode_privacy.spark needs PySpark: pip install 'postcode-privacy[spark]'"
    ) from exc

from ..errors import InvalidParameterError
from ..mechanism.keys import Key
from ..release.options import ReleaseOptions
from ..release.plan import ReleasePlan
from ..release.subjects import warn_duplicate_subjects
from .check_pass import SparkCheck, _run_check
from .columns import _check_arrow_types, _check_columns_ignoring_case, _check_postcode_type
from .executors import ExecutorEnvironmentError, _probe_executors
from .release_pass import _release_frame
from .shipping import ARTEFACT_PREFIX, _resolve_graph, _SealedKey, _ship_graph
from .shipping import worker_graph_loads as worker_graph_loads  # diagnostics the tests read
from .shipping import worker_graph_tasks as worker_graph_tasks
from .tasks import _TaskSpec

__all__ = ["perturb", "check", "SparkCheck", "ExecutorEnvironmentError", "ARTEFACT_PREFIX"]

# The public classes carry the name they are imported by (in tracebacks, reprs and pickles), not
# that of the private module defining them, as when this package was one module.
SparkCheck.__module__ = ExecutorEnvironmentError.__module__ = __name__


# -- public recipes -------------------------------------------------------------------------------


def _prepare(
    df: DataFrame,
    *,
    key: Key,
    graph=None,
    options: ReleaseOptions | None = None,
    **option_kwargs: Any,
) -> _TaskSpec:
    """Driver side: options, columns and graph checked, executors probed, graph shipped."""
    if not isinstance(df, DataFrame):
        raise TypeError("df must be a pyspark.sql.DataFrame")
    if not isinstance(key, Key):
        raise TypeError("key must be a postcode_privacy.Key")
    if df.isStreaming:
        # The check pass reads every record before anything is released (global record
        # numbers, no partial output), which a stream that never ends cannot give.
        raise InvalidParameterError(
            "a streaming DataFrame cannot be released: every record is checked before any is "
            "released; write the stream to a table first, or release each micro-batch inside "
            "writeStream.foreachBatch"
        )
    # Cheap checks first, so that a typo fails before the graph is loaded.
    options = ReleaseOptions.build(options, **option_kwargs)
    options.check_columns(df.columns)
    _check_arrow_types(df.schema)
    _check_postcode_type(df.schema, options)
    session = df.sparkSession
    if str(session.conf.get("spark.sql.caseSensitive", "false")).lower() != "true":
        _check_columns_ignoring_case(df.columns, options)
    resolved, path = _resolve_graph(graph)
    plan = ReleasePlan(key=key, options=options, graph=resolved)
    _probe_executors(session)
    ref = _ship_graph(session, resolved, path)
    return _TaskSpec(graph=ref, options=options, expected_radius=plan.mechanism.radius)


def check(
    df: DataFrame, *, graph=None, options: ReleaseOptions | None = None, **option_kwargs: Any
) -> SparkCheck:
    """Apply the release's input rules to a Spark DataFrame without releasing anything.

    The options are a :class:`ReleaseOptions` or its fields as keywords (``id_column``,
    ``postcode_column``, and optionally ``on_error``, ``out_column``, ``terminated``; epsilon
    does not matter here and defaults to 1).  Runs one Spark job and returns the counts
    ``perturb_frame`` would report (``"nulled"`` and ``"dropped"`` follow ``on_error``), the
    first failing records with global 1-based numbers, and the records per partition.  Never
    raises for failing records; ``result.error()`` is the exception ``perturb`` would raise
    under ``on_error="error"`` (None when no record fails).  No key is needed.
    """
    if options is None:
        option_kwargs.setdefault("epsilon", 1)  # no draw is made: any valid epsilon will do
    spec = _prepare(df, key=Key.generate(), graph=graph, options=options, **option_kwargs)
    return _run_check(df, spec)


def perturb(
    df: DataFrame,
    *,
    key: Key,
    graph=None,
    options: ReleaseOptions | None = None,
    **option_kwargs: Any,
) -> DataFrame:
    """Release the postcodes of a Spark DataFrame: ``perturb_frame`` on every partition.

    Options mean what they mean for :func:`postcode_privacy.perturb_frame`: a
    :class:`ReleaseOptions` as ``options=``, or its fields as keywords.  ``graph`` is a
    :class:`Graph`, the path of a graph artefact file (a local or mounted path the driver can
    read), or ``None`` for the national graph.  The result has every column of ``df`` except
    ``postcode_column`` (kept when ``keep_source_postcode``), in order, then ``out_column``
    (string, empty for failed records under ``on_error="null"``); rows keep their order.

    Runs the check pass at once (one Spark job): under ``on_error="error"`` a failing record
    raises :class:`InputDataError` here, naming global 1-based record numbers; an identifier
    seen with two postcodes gives a :class:`DuplicateSubjectWarning`.  The release itself is
    lazy: it runs when the returned DataFrame is written or collected.  Every released value
    depends only on its own record, so it is the same whatever the partitioning.
    """
    spec = _prepare(df, key=key, graph=graph, options=options, **option_kwargs)
    checked = _run_check(df, spec)
    error = checked.error()
    if error is not None and spec.options.on_error == "error":
        raise error
    conflicts = checked.counts["identifiers_with_several_postcodes"]
    if conflicts:
        warn_duplicate_subjects(conflicts, checked.conflict_rows)
    return _release_frame(df, spec, _SealedKey(key), checked.offsets)
