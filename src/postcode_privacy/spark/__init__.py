"""Releasing a Spark DataFrame: the release recipe run on every partition with ``mapInArrow``.

The user guide is docs/spark.md.  Nothing here decides an output.  Each partition is handed, in
chunks of its Arrow batches, to :meth:`ReleasePlan.process_chunk`, the function behind
``perturb_frame`` and the ``perturb`` command, and every released postcode depends only on its
own record (key, subject, postcode, graph, epsilon, radius).  So the released column equals
``perturb_frame``'s for the same records, whatever the partitioning.

How a release runs (:func:`perturb`):

1. On the driver, the key's type, the options (:class:`ReleaseOptions`) and the columns are
   checked, then the graph is
   resolved (``None`` is the national graph's cached artefact, a path is an artefact file, and a
   :class:`Graph` object is saved once to a temporary artefact) and a :class:`ReleasePlan` is
   built, which checks the other options.  So bad options fail before any Spark job.
2. A one-row probe job checks that the executors' Python imports this package at the driver's
   output-stability version (else :class:`ExecutorEnvironmentError`, naming ``PYSPARK_PYTHON``).
   The artefact is shipped to the executors once, as a file (``SparkContext.addFile``; on
   Spark Connect ``SparkSession.addArtifacts(..., file=True)``), under a name derived from its
   sha256.  Each Python worker loads it at most once
   (``SparkFiles.get``, memory-mapped), checks that its content hash is the driver's, and keeps
   it in a module-level cache keyed by that hash.  The graph is never pickled into a task.
3. A check pass (one Spark job, no draws and no key) applies the input rules to every record,
   counts the records of each partition, and looks for identifiers seen with two postcodes.
   Record numbers are global and 1-based: partition ``p``'s records are numbered after those of
   partitions ``0 .. p - 1``, in the order Spark reads them.  With ``on_error="error"`` any
   failing record raises :class:`InputDataError` here, on the driver, with the same message and
   listed records as ``perturb_frame``.
4. The release pass is returned as a lazy DataFrame; it runs when an action (write, collect)
   needs it.  Rows keep their order within and across partitions.

The key travels only inside the task closure, as its key-file bytes held by an object with a
withheld repr: it is never a Column literal, a configuration value or a file, so it does not
appear in ``explain()``, the SQL plan, the Spark UI or the event log.  The closure itself goes
from driver to executors over Spark's RPC channel: see docs/spark.md, "The key", for the settings
that encrypt it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import tempfile
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

try:
    from pyspark import SparkFiles, TaskContext
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "postcode_privacy.spark needs PySpark: pip install 'postcode-privacy[spark]'"
    ) from exc

from .. import errors
from ..engine.batch import WORKERS_ENV
from ..errors import (
    ArtefactError,
    InputDataError,
    InvalidParameterError,
    PostcodePrivacyError,
    TeleportWarning,
)
from ..graph.artefact import load_graph, save_graph
from ..graph.graph import Graph
from ..mechanism.keys import Key
from ..release.options import ReleaseOptions
from ..release.plan import ReleasePlan
from ..release.reader import first_invalid_record
from ..release.records import MAX_LISTED_ERRORS, ChunkCheck, failure_error
from ..release.subjects import subject_hash, warn_duplicate_subjects

__all__ = ["perturb", "check", "SparkCheck", "ExecutorEnvironmentError", "ARTEFACT_PREFIX"]

ARTEFACT_PREFIX = "postcode-privacy-graph-"
_ARTEFACT_SUFFIX = ".ppgraph"
_MAX_CONFLICT_ROWS = 5  # record numbers quoted in a duplicate-subject warning, as perturb_frame
_WORKER_CACHE_SIZE = 2  # graphs kept per Python worker
RELEASE_CHUNK = 50_000  # records handed to process_chunk at once (Arrow batches are 10,000)

# Schema of the check pass: one row per partition (summary ``s`` set) and one row per distinct
# (identifier hash, true postcode) pair of a partition (``h``, ``c`` and its first record ``r``).
_CHECK_SCHEMA = "p int, r long, h long, c long, s string"
_CHECK_ARROW = pa.schema(
    [("p", pa.int32()), ("r", pa.int64()), ("h", pa.int64()), ("c", pa.int64()), ("s", pa.string())]
)
_CHECK_ID, _CHECK_POSTCODE = "id", "postcode"  # the two columns the check pass reads, renamed
_CHECK_OUT = "released"


# -- the key inside a closure ---------------------------------------------------------------------


class _SealedKey:
    """Key-file bytes carried to executors inside the task closure; never shown.

    ``Key`` refuses pickling so that it is never copied by accident; this holder is the one
    deliberate exception, and it only ever travels inside the closure Spark sends to its Python
    workers (never into a plan, a literal or a configuration value).
    """

    __slots__ = ("_data",)

    def __init__(self, key: Key):
        self._data = key.to_file_bytes()

    def open(self) -> Key:
        return Key.from_file_bytes(self._data)

    def __repr__(self) -> str:
        return "<key withheld>"

    __str__ = __repr__

    def __reduce__(self):
        return (_unseal, (self._data,))


def _unseal(data: bytes) -> _SealedKey:
    sealed = _SealedKey.__new__(_SealedKey)
    sealed._data = data
    return sealed


# -- shipping the graph ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _GraphRef:
    """What a worker needs to find and verify the shipped artefact."""

    file_name: str
    sha256: str


_ship_lock = threading.Lock()
_shipped: set[tuple[str, str]] = set()  # (application id, file name) already added
_staging: Path | None = None


def _staging_dir() -> Path:
    global _staging
    if _staging is None:
        _staging = Path(tempfile.mkdtemp(prefix="postcode-privacy-spark-"))
        atexit.register(shutil.rmtree, _staging, ignore_errors=True)
    return _staging


def _artefact_name(sha256: str) -> str:
    return f"{ARTEFACT_PREFIX}{sha256}{_ARTEFACT_SUFFIX}"


_default_path: Path | None = None


def _default_artefact_path() -> Path | None:
    """The national graph's cached artefact, if it exists (located once per process: finding
    it hashes the installed source files).  Workers verify its content hash in any case."""
    global _default_path
    if _default_path is None:
        from ..graph.national import default_graph_path

        _default_path = default_graph_path()
    return _default_path if _default_path.is_file() else None


def _resolve_graph(graph) -> tuple[Graph, Path | None]:
    """The driver's graph and an artefact file holding exactly it (None: one must be written)."""
    if graph is None:
        from ..graph.national import default_graph

        resolved = default_graph(progress=False)
        return resolved, _default_artefact_path()
    if isinstance(graph, Graph):
        if graph.params.get("source") == "bundled-codepoint":
            from ..graph.national import default_graph

            path = _default_artefact_path()
            if path is not None and default_graph(progress=False).sha256 == graph.sha256:
                return graph, path
        return graph, None
    if isinstance(graph, (str, os.PathLike)):
        return load_graph(graph), Path(graph)
    raise TypeError("graph must be a postcode_privacy.Graph, the path of a graph artefact, or None")


def _is_connect(session) -> bool:
    """True for a Spark Connect session (no SparkContext on the client)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


def _session_id(session) -> str:
    return session.session_id if _is_connect(session) else session.sparkContext.applicationId


def _ship_graph(session, graph: Graph, path: Path | None) -> _GraphRef:
    """Ship the artefact to the session's executors once, under a name fixed by its content hash.

    Classic Spark: ``SparkContext.addFile``.  Spark Connect, which has no SparkContext on the
    client: ``SparkSession.addArtifacts(..., file=True)``, which uploads the file to the server
    for this session; on the executors both are found with ``SparkFiles.get``, and the worker
    checks the content hash either way.  The name makes shipping safe to repeat: one name is
    always one content.  A graph held only in memory is written once to a private temporary
    directory; an existing artefact is hard-linked there (copied where that is not possible) so
    that it can carry that name.
    """
    name = _artefact_name(graph.sha256)
    marker = (_session_id(session), name)
    with _ship_lock:
        if marker in _shipped:
            return _GraphRef(name, graph.sha256)
        target = _staging_dir() / name
        if not target.exists():
            if path is None:
                save_graph(graph, target)
            else:
                try:  # Spark resolves symbolic links to their target's name: hard link
                    os.link(path, target)
                except OSError:
                    shutil.copyfile(path, target)
        if _is_connect(session):
            session.addArtifacts(str(target), file=True)
        else:
            session.sparkContext.addFile(str(target))
        _shipped.add(marker)
    return _GraphRef(name, graph.sha256)


# Worker side: graphs loaded by this Python process, newest last, how often each was loaded, and
# how many tasks (partitions of either pass) asked for a graph here.
_worker_lock = threading.Lock()
_worker_graphs: OrderedDict[str, Graph] = OrderedDict()
_worker_loads: dict[str, int] = {}
_worker_tasks = 0


def _worker_graph(ref: _GraphRef) -> Graph:
    """The shipped graph, loaded from its file at most once per Python worker and verified.

    Postcondition: the returned graph's content hash is ``ref.sha256``, the driver's graph.
    Raises :class:`ArtefactError` if the file cannot be read or holds another graph.
    """
    global _worker_tasks
    with _worker_lock:
        _worker_tasks += 1
        graph = _worker_graphs.get(ref.sha256)
        if graph is None:
            graph = load_graph(SparkFiles.get(ref.file_name))  # hash-checked against its header
            if graph.sha256 != ref.sha256:
                raise ArtefactError(
                    "the graph artefact on this executor is not the driver's "
                    "graph (its sha256 differs)"
                )
            _worker_loads[ref.sha256] = _worker_loads.get(ref.sha256, 0) + 1
            _worker_graphs[ref.sha256] = graph
            while len(_worker_graphs) > _WORKER_CACHE_SIZE:
                _worker_graphs.popitem(last=False)
        else:
            _worker_graphs.move_to_end(ref.sha256)
        return graph


def worker_graph_loads() -> dict[str, int]:
    """How many times this Python process has loaded each shipped graph (a diagnostic)."""
    with _worker_lock:
        return dict(_worker_loads)


def worker_graph_tasks() -> int:
    """How many tasks in this Python process have asked for a shipped graph (a diagnostic)."""
    with _worker_lock:
        return _worker_tasks


# -- the executors' Python -------------------------------------------------------------------------


class ExecutorEnvironmentError(RuntimeError):
    """The executors' Python cannot run the release (the package is missing or another version)."""


def _probe_function(expected: str):
    """A function for one tiny task that reports whether the executor's Python can import this
    package, and its output-stability version.  It is a nested function that names nothing of
    this module, so it is pickled by value: unpickling it on the executor needs no
    ``postcode_privacy`` (the release's own functions are pickled by reference and would fail
    there with a long trace)."""

    def postcode_privacy_probe():
        try:
            import importlib

            version = importlib.import_module("postcode_privacy.version")
            importlib.import_module("postcode_privacy.spark")
        except BaseException as exc:  # noqa: BLE001 - any failure is reported as text
            return f"import failed: {type(exc).__name__}: {exc}"
        found = version.OUTPUT_STABILITY_VERSION
        return (
            ""
            if found == expected
            else (f"output-stability version {found} is installed there, {expected} on the driver")
        )

    return postcode_privacy_probe


_RAISED = re.compile(r"^\s*([\w.]*(?:Error|Exception): .+)$", re.MULTILINE)


def _worker_failure(exc: Exception) -> str:
    """The line of a failed probe job that says why: the last exception its Python worker
    raised (such as "ModuleNotFoundError: No module named 'pyarrow'", where Spark runs even a
    plain UDF through Arrow), else the first line; Spark's own first line is a generic header.
    (The probe reads no records, so nothing here can quote one.)"""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    raised = _RAISED.findall(text)
    return (raised[-1] if raised else text.splitlines()[0]).strip()[:300]


def _probe_executors(session) -> None:
    """Run one tiny job that imports the package on an executor; fail with one clear message.

    Raises :class:`ExecutorEnvironmentError` naming ``PYSPARK_PYTHON`` when the executors' Python
    cannot import ``postcode_privacy`` or has another output-stability version (which could
    change released postcodes).  Costs one single-row job per call.
    """
    from ..version import OUTPUT_STABILITY_VERSION

    probe = F.udf(_probe_function(OUTPUT_STABILITY_VERSION), StringType())
    advice = (
        "install postcode-privacy (the same version as on the driver) in the Python "
        "environment the executors use, or point PYSPARK_PYTHON (spark.pyspark.python) at "
        'a Python that has it; see docs/spark.md, "What the workers need"'
    )
    try:
        found = session.range(0, 1, 1, 1).select(probe().alias("v")).collect()[0]["v"]
    except Exception as exc:  # the Python worker itself could not start
        raise ExecutorEnvironmentError(
            f"the executors could not run a Python task ({_worker_failure(exc)}); {advice}"
        ) from None
    if found:
        raise ExecutorEnvironmentError(
            f"the executors' Python cannot run the release: {found}; {advice}"
        )


# -- options shared by both passes --------------------------------------------------------------


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


# -- the check pass -------------------------------------------------------------------------------


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
                {"h": hashes, "c": checked.codes[ok], "r": ok.astype(np.int64) + seen + 1}
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

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)

    @property
    def offsets(self) -> list[int]:
        """Records before each partition, in partition order."""
        return _offsets(self.partition_records)

    def error(self) -> InputDataError:
        """The error ``perturb_frame`` raises for these failures under ``on_error="error"``."""
        return failure_error(self.row_errors, self.counts)


def _offsets(records: list[int]) -> list[int]:
    out, total = [], 0
    for n in records:
        out.append(total)
        total += n
    return out


def _quoted(name: str):
    return F.col("`" + name.replace("`", "``") + "`")


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

    def postcode_privacy_check(batches):
        # Arrow in and out (``mapInArrow``), the records read as the release pass reads them
        # (``_records_frame``), so that both passes judge every record alike.
        names = [_CHECK_ID, _CHECK_POSTCODE]

        def frames():
            seen = 0
            for batch in batches:
                table = pa.Table.from_batches([batch])
                yield _records_frame(table, names, renamed.options, seen)
                seen += table.num_rows

        for found in _check_partition(renamed, frames()):
            yield pa.RecordBatch.from_pandas(found, schema=_CHECK_ARROW, preserve_index=False)

    # Plain aliases: Spark parses the names of a ``mapInArrow`` input, so a name holding a dot
    # or a backtick would fail there even though the select quoted it.
    pre = df.select(
        _quoted(options.id_column).alias(_CHECK_ID),
        _quoted(options.postcode_column).alias(_CHECK_POSTCODE),
    ).mapInArrow(postcode_privacy_check, _CHECK_SCHEMA)
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
    )


_WORKER_ERROR = re.compile(r"^postcode_privacy\.errors\.(\w+): (.+)$", re.MULTILINE)


def _library_error(exc: Exception) -> PostcodePrivacyError | None:
    """The library's own error that a Python worker raised, as Spark reports it (the worker's
    traceback inside a ``PythonException``, local or over Spark Connect), rebuilt as that
    type with the same message; None if the failure was not one of the library's errors.
    So an executor that cannot read the shipped graph fails the check pass with
    :class:`ArtefactError`, as ``perturb_frame`` would, not a Py4J or gRPC traceback."""
    found = _WORKER_ERROR.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    kind = getattr(errors, name, None)
    if not (isinstance(kind, type) and issubclass(kind, PostcodePrivacyError)):
        return None
    return kind(message)


# -- the release pass -----------------------------------------------------------------------------


def _rows_text(error: InputDataError) -> str:
    listed = "; ".join(f"record {row}: {reason}" for row, reason in error.row_errors)
    return f" [{listed}]" if listed else ""


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
    if pa.types.is_integer(kind):
        return pd.ArrowDtype(kind)
    return None  # pyarrow's own conversion (text as str, the rest as it always is)


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
            # message crosses to the driver as text, so it carries the listed records itself.
            raise InputDataError(
                f"{exc}{_rows_text(exc)} (found while releasing partition {partition}: the "
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


def _positional(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(count)]


def _output_fields(df: DataFrame, options: ReleaseOptions) -> list[StructField]:
    fields = [
        f
        for f in df.schema.fields
        if options.keep_source_postcode or f.name != options.postcode_column
    ]
    return fields + [StructField(options.out_column, StringType(), True)]


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
    session = df.sparkSession
    if str(session.conf.get("spark.sql.caseSensitive", "false")).lower() != "true":
        _check_columns_ignoring_case(df.columns, options)
    resolved, path = _resolve_graph(graph)
    plan = ReleasePlan(key=key, options=options, graph=resolved)
    _probe_executors(session)
    ref = _ship_graph(session, resolved, path)
    return _TaskSpec(graph=ref, options=options, expected_radius=plan.mechanism.radius)


def _check_arrow_types(schema: StructType) -> None:
    """Refuse, before any Spark job, a column whose type Spark cannot hand to Python as Arrow
    (an interval year to month, a calendar interval, a char or varchar kept as such, or one of
    these inside a struct, array or map; a struct with two fields of one name): both passes go
    through ``mapInArrow``, which would otherwise fail after the check pass with PySpark's own
    error.  The column is named by its 1-based position and its type in plain words, as
    ``check_columns`` names columns."""
    from pyspark.sql.pandas.types import to_arrow_type

    for position, column in enumerate(schema.fields, start=1):
        try:
            to_arrow_type(column.dataType, timezone="UTC")
        except Exception:  # PySpark's type error: the type alone is the news
            raise InputDataError(
                f"column {position} holds {_spark_type_words(column.dataType)} that Spark "
                "cannot pass to Python as Arrow for the release; cast it (for example to a "
                "string) or leave it out first"
            ) from None
        if _repeats_a_field_name(column.dataType):
            # PySpark's conversion allows it, but the JVM refuses it when the release is
            # written, quoting the field names: refused here, before any job, naming nothing.
            raise InputDataError(
                f"column {position} holds structs with two fields of the same name, which "
                "Spark cannot pass to Python as Arrow for the release; rename a field, or "
                "leave the column out first"
            )


def _repeats_a_field_name(kind) -> bool:
    """Whether a struct in ``kind`` (at any depth, inside arrays and maps too) has two fields
    of exactly the same name."""
    from pyspark.sql import types

    if isinstance(kind, types.StructType):
        names = [f.name for f in kind.fields]
        return len(set(names)) < len(names) or any(
            _repeats_a_field_name(f.dataType) for f in kind.fields
        )
    if isinstance(kind, types.ArrayType):
        return _repeats_a_field_name(kind.elementType)
    if isinstance(kind, types.MapType):
        return _repeats_a_field_name(kind.keyType) or _repeats_a_field_name(kind.valueType)
    return False


def _spark_type_words(kind) -> str:
    """A Spark column type in plain words, never its text: ``simpleString`` lists a struct's
    field names, which are the input's own (as ``release/type_words.py`` does for Arrow)."""
    from pyspark.sql import types

    for spark_type, words in (
        (types.StructType, "structs"),
        (types.ArrayType, "lists"),
        (types.MapType, "maps"),
        (types.YearMonthIntervalType, "intervals"),
        (types.DayTimeIntervalType, "intervals"),
        (types.CalendarIntervalType, "intervals"),
        (types.CharType, "fixed-length strings"),
        (types.VarcharType, "strings of bounded length"),
    ):
        if isinstance(kind, spark_type):
            return words
    return "values"


def _check_columns_ignoring_case(columns: list[str], options: ReleaseOptions) -> None:
    """Spark compares column names ignoring case unless ``spark.sql.caseSensitive`` is set:
    refuse, as ``check_columns`` does, two columns it would take for one, or an output column
    it would take for an input one (the release would fail later, or be unusable)."""
    # Columns are named by position only: a DataFrame read from a CSV file without a header
    # line has cell values for names.
    seen: dict[str, int] = {}
    for position, name in enumerate(columns, start=1):
        other = seen.setdefault(name.lower(), position)
        if other != position:
            raise InputDataError(
                f"columns {other} and {position} differ only in case, and Spark takes them for "
                "one (spark.sql.caseSensitive is off); rename one"
            )
    if options.out_column.lower() in seen:
        raise InputDataError(
            f"column {seen[options.out_column.lower()]} of the input has a name Spark takes "
            f"for {options.out_column!r} (it ignores case); choose another "
            f"{options.flag('out_column')}"
        )


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
    under ``on_error="error"``.  No key is needed.
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
    if checked.failed and spec.options.on_error == "error":
        raise checked.error()
    conflicts = checked.counts["identifiers_with_several_postcodes"]
    if conflicts:
        warn_duplicate_subjects(conflicts, checked.conflict_rows, stacklevel=2)
    return _release_frame(df, spec, _SealedKey(key), checked.offsets)


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
    positional = df.select(
        *[_quoted(name).alias(alias) for name, alias in zip(names, _positional("c", len(names)))]
    )
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
