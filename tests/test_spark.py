"""The Spark path (``postcode_privacy.spark``) on a local two-core Spark session.

Without PySpark (``pip install '.[test]'`` alone) the module is skipped with a reason; CI
installs the ``spark`` extra and sets ``POSTCODE_PRIVACY_REQUIRE_OPTIONAL=1``, so there a missing
PySpark (or Java) is a failure, never a skip (tests/optional.py).  One session serves the whole
module; it is started with three default partitions so that record numbering across partitions
is exercised.
"""

from __future__ import annotations

import base64
import os
import pickle
import random
import sys
import uuid
import warnings

import pandas as pd
import pytest
from optional import require, require_java

require("pyspark", "pip install '.[spark]'")
require_java()
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from spark_helpers import (  # noqa: E402
    EPSILON,
    PANDAS3_COPY,
    PANDAS3_NOTICE,
    assert_same_release,
    event_log_text,
    records,
    small_records,
)
from spark_helpers import small_graph as make_small_graph  # noqa: E402

from postcode_privacy import (  # noqa: E402
    InputDataError,
    InvalidParameterError,
    Key,
    ReleaseOptions,
    perturb_frame,
)
from postcode_privacy import spark as pps  # noqa: E402  (imports PySpark)
from postcode_privacy.errors import ArtefactError, DuplicateSubjectWarning  # noqa: E402
from postcode_privacy.spark import check_pass, executors, release_pass, shipping, tasks  # noqa: E402

# The random records reuse identifiers at several postcodes, which warns by design;
# test_duplicate_subjects_warn_like_perturb_frame asserts that warning (pytest.warns still sees it).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.filterwarnings(PANDAS3_NOTICE),
    pytest.mark.filterwarnings(PANDAS3_COPY),
    pytest.mark.filterwarnings("ignore::postcode_privacy.errors.DuplicateSubjectWarning"),
]


@pytest.fixture(scope="module")
def event_log(tmp_path_factory):
    return tmp_path_factory.mktemp("spark-events")


@pytest.fixture(scope="module")
def spark(event_log):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # PySpark's notice about pandas 3
        session = (
            SparkSession.builder.master("local[2]")
            .appName(f"postcode-privacy-tests-{uuid.uuid4().hex[:8]}")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.default.parallelism", "3")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.driver.memory", "2g")
            .config("spark.eventLog.enabled", "true")
            .config("spark.eventLog.dir", event_log.as_uri())
            .config("spark.eventLog.compress", "false")
            .getOrCreate()
        )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory):
    return make_small_graph(tmp_path_factory.mktemp("graph"))


# -- identity with perturb_frame ----------------------------------------------------------------


@pytest.mark.parametrize(
    "on_error, keep, out_column, as_path",
    [
        ("null", False, "postcode_dp", True),
        ("drop", True, "released", False),
    ],
)
def test_same_output_as_perturb_frame(spark, small_graph, on_error, keep, out_column, as_path):
    graph, path = small_graph
    pdf = small_records(600, seed=1)
    sdf = spark.createDataFrame(pdf)
    assert sdf.rdd.getNumPartitions() == 3
    key = Key.generate()
    options = dict(
        key=key,
        epsilon=EPSILON,
        id_column="sid",
        postcode_column="pc",
        on_error=on_error,
        keep_source_postcode=keep,
        out_column=out_column,
    )
    out = pps.perturb(sdf, graph=path if as_path else graph, **options).toPandas()
    local = perturb_frame(pdf, graph=graph, **options)
    assert_same_release(out, local)
    released = local[out_column]
    assert released.notna().sum() == 596  # four failing rows
    assert len(set(released.dropna())) > 20  # real draws, not one value


def test_same_output_as_the_cli_from_a_csv_file(spark, small_graph, tmp_path):
    from postcode_privacy.cli import main
    from postcode_privacy.keyfile import write_key_file

    _, path = small_graph
    key = Key.generate()
    write_key_file(key, tmp_path / "key")

    def released(sdf):
        options = dict(epsilon=EPSILON, id_column="sid", postcode_column="pc", on_error="null")
        return pps.perturb(sdf, key=key, graph=path, **options).toPandas()

    small_records(400, seed=12).to_csv(tmp_path / "in.csv", index=False)
    cli_options = ["--key", str(tmp_path / "key"), "--epsilon", EPSILON, "--id-column", "sid"]
    cli_options += ["--postcode-column", "pc", "--graph", str(path), "--on-error", "null", "-q"]
    code = main(
        ["perturb", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.csv"), *cli_options]
    )
    assert code == 0
    cli = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    out = released(spark.read.csv(str(tmp_path / "in.csv"), header=True))
    assert out["sid"].fillna("").tolist() == cli["sid"].tolist()
    assert out["postcode_dp"].fillna("").tolist() == cli["postcode_dp"].tolist()
    assert (cli["postcode_dp"] == "").sum() == 4
    # Unsigned 64-bit identifiers in Parquet, which Spark reads as decimal(20, 0): every record
    # was refused on Spark and released by the command (a hostile review of round 27).
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = pa.array([2**64 - 1 - i for i in range(len(cli))], pa.uint64())
    pcs = pd.read_csv(tmp_path / "in.csv", dtype=str, keep_default_na=False)["pc"].tolist()
    pq.write_table(pa.table({"sid": ids, "pc": pcs}), tmp_path / "u64.parquet")
    args = [str(tmp_path / "u64.parquet"), "-o", str(tmp_path / "u64.csv"), *cli_options]
    assert main(["perturb", *args]) == 0
    cli = pd.read_csv(tmp_path / "u64.csv", dtype=str, keep_default_na=False)
    sdf = spark.read.parquet(str(tmp_path / "u64.parquet"))
    assert sdf.schema["sid"].dataType.simpleString() == "decimal(20,0)"
    out = released(sdf)
    assert out["postcode_dp"].fillna("").tolist() == cli["postcode_dp"].tolist()
    assert (cli["postcode_dp"] != "").sum() >= len(cli) - 4  # (the failing postcodes only)


def test_key_changes_output_and_repartitioning_does_not(spark, small_graph):
    graph, path = small_graph
    pdf = small_records(300, seed=2)
    sdf = spark.createDataFrame(pdf)
    options = dict(
        epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path, on_error="null"
    )
    key = Key.generate()
    first = pps.perturb(sdf, key=key, **options).toPandas()
    coalesced = pps.perturb(sdf.coalesce(1), key=key, **options).toPandas()
    other = pps.perturb(sdf, key=Key.generate(), **options).toPandas()
    assert records(first) == records(coalesced)
    assert (first["postcode_dp"] != other["postcode_dp"]).sum() > 100


def test_batch_and_chunk_sizes_do_not_change_the_output(spark, small_graph):
    graph, path = small_graph
    pdf = small_records(700, seed=15)
    options = dict(
        key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", on_error="drop"
    )
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "40")
    try:
        sdf = spark.createDataFrame(pdf)
        prepared = pps._prepare(
            sdf,
            graph=path,
            radius=None,
            out_column="postcode_dp",
            keep_source_postcode=False,
            terminated="error",
            **options,
        )
        offsets = check_pass._run_check(sdf, prepared).offsets
        out = release_pass._release_frame(
            sdf, prepared, shipping._SealedKey(options["key"]), offsets, chunk=100
        ).toPandas()  # chunks of three batches of 40
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert_same_release(out, perturb_frame(pdf, graph=graph, **options))


def test_chunks_regroup_arrow_batches_in_order():
    import pyarrow as pa

    batches = [
        pa.RecordBatch.from_pydict(
            {
                "a": list(range(i * 10, i * 10 + n)),
                "s": [f"v{i}{j}" for j in range(n - 1)] + [None],
            }
        )
        for i, n in enumerate([4, 3, 5, 2])
    ]
    chunks = list(release_pass._chunks(iter(batches), 6))
    assert [c.num_rows for c in chunks] == [7, 7]
    assert pa.concat_tables(chunks).equals(pa.Table.from_batches(batches))
    assert list(release_pass._chunks(iter([]), 6)) == []


def test_check_reports_the_counts_of_perturb_frame(spark, small_graph):
    graph, path = small_graph
    pdf = small_records(450, seed=3)
    result = pps.check(
        spark.createDataFrame(pdf),
        id_column="sid",
        postcode_column="pc",
        graph=path,
        on_error="drop",
    )
    _, local_counts = perturb_frame(
        pdf,
        key=Key.generate(),
        epsilon=EPSILON,
        id_column="sid",
        postcode_column="pc",
        graph=graph,
        on_error="drop",
        with_counts=True,
    )
    assert result.counts == local_counts
    assert len(result.partition_records) == 3 and sum(result.partition_records) == 450
    assert result.offsets == [0, result.partition_records[0], sum(result.partition_records[:2])]


def test_empty_frame(spark, small_graph):
    _, path = small_graph
    sdf = spark.createDataFrame(small_records(30, seed=4)).limit(0)
    out = pps.perturb(
        sdf, key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path
    )
    assert out.columns == ["sid", "x", "w", "postcode_dp"]
    assert out.count() == 0


def test_release_does_not_fork_engine_processes_inside_spark_workers(spark, small_graph):
    """Spark runs one Python worker per task slot; the engine must not add a process per CPU."""
    from postcode_privacy.engine.batch import PARALLEL_MIN

    _, path = small_graph
    n = PARALLEL_MIN + 500  # one batch large enough for the engine's worker processes
    sdf = spark.createDataFrame(small_records(n, seed=14)).coalesce(1)
    options = pps._prepare(
        sdf,
        key=Key.generate(),
        epsilon=EPSILON,
        id_column="sid",
        postcode_column="pc",
        graph=path,
        radius=None,
        on_error="null",
        out_column="postcode_dp",
        keep_source_postcode=False,
        terminated="error",
    )
    sealed = shipping._SealedKey(Key.generate())

    names = list(sdf.columns)

    def release_counting_forks(batches):
        import pyarrow as pa

        forks = []
        os.register_at_fork(before=lambda: forks.append(1))
        released = release_pass._release_partition(options, sealed, [0], batches, names)
        rows = sum(out.num_rows for out in released)
        yield pa.RecordBatch.from_pydict({"rows": [rows], "forks": [len(forks)]})

    result = sdf.mapInArrow(release_counting_forks, "rows long, forks long").toPandas()
    assert result["rows"].tolist() == [n]
    assert result["forks"].tolist() == [0]


# -- input rules and error policies ---------------------------------------------------------------


def test_columns_spark_takes_for_one_are_refused_up_front(spark, small_graph):
    """Spark ignores case in column names by default: an input column POSTCODE_DP would clash
    with the released postcode_dp, and sid with SID; both are refused before any job, naming
    the columns (a hostile review found an unusable result and a raw AnalysisException)."""
    _, path = small_graph
    pdf = small_records(10, seed=4)
    common = dict(key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc")
    clash = spark.createDataFrame(pdf.assign(POSTCODE_DP="x"))
    last = len(clash.columns)  # named by position, never by a name that may be a cell
    with pytest.raises(
        InputDataError, match=f"column {last} of the input has a name Spark takes for 'postcode_dp'"
    ):
        pps.perturb(clash, graph=path, **common)
    # (a twin of the postcode column is refused by every entry point: ReleaseOptions)
    twins = spark.createDataFrame(pdf.assign(SID="x"))
    first = twins.columns.index("sid") + 1
    with pytest.raises(
        InputDataError, match=f"columns {first} and {len(twins.columns)} differ only in case"
    ):
        pps.perturb(twins, graph=path, **common)


def test_error_policy_names_global_records_like_perturb_frame(spark, small_graph):
    graph, path = small_graph
    pdf = small_records(900, seed=5)
    for i in [5, 12, 320, *range(610, 640)]:  # failures in every partition
        pdf.loc[i, "pc"] = "AB1"
    sdf = spark.createDataFrame(pdf)
    options = dict(
        key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path
    )
    with pytest.raises(InputDataError) as remote:
        pps.perturb(sdf, **options)
    with pytest.raises(InputDataError) as local:
        perturb_frame(pdf, **{**options, "graph": graph})
    assert str(remote.value) == str(local.value)
    assert remote.value.row_errors == local.value.row_errors
    assert remote.value.total_errors == local.value.total_errors == 37
    rows = [r for r, _ in remote.value.row_errors]
    assert rows[:7] == [6, 8, 13, 301, 321, 451, 611]  # 1-based, across all three partitions
    assert len(rows) == 20 and rows == sorted(rows)


def test_a_failure_found_only_while_releasing_still_names_global_records(spark, small_graph):
    """The release pass re-applies the rules: an input that changed after its check still fails,
    naming records by the check pass's partition offsets."""
    from pyspark.errors import PythonException

    _, path = small_graph
    pdf = small_records(900, seed=13)
    pdf.loc[[7, 450, 897], "pc"] = "LS1 1AA"
    pdf.loc[300, "sid"] = "S1"
    clean = spark.createDataFrame(pdf)
    options = pps._prepare(
        clean,
        key=Key.generate(),
        epsilon=EPSILON,
        id_column="sid",
        postcode_column="pc",
        graph=path,
        radius=None,
        on_error="error",
        out_column="postcode_dp",
        keep_source_postcode=False,
        terminated="error",
    )
    offsets = check_pass._run_check(clean, options).offsets
    assert offsets == [0, 300, 600]
    pdf.loc[[640, 650], "pc"] = "not a postcode"  # the input changes after its check
    changed = spark.createDataFrame(pdf)
    released = release_pass._release_frame(
        changed, options, shipping._SealedKey(Key.generate()), offsets
    )
    with pytest.raises(PythonException) as failure:
        released.collect()
    message = str(failure.value)
    assert "InputDataError: 2 of 300 records cannot be released" in message
    assert "record 641: not a UK postcode in form; record 651:" in message
    assert "the input changed after the check pass" in message


def test_bad_options_fail_on_the_driver_before_any_job(spark, small_graph):
    _, path = small_graph
    sdf = spark.createDataFrame(small_records(30, seed=7))
    tracker = spark.sparkContext.statusTracker()
    group = f"options-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "bad options")
    base = dict(
        key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path
    )
    with pytest.raises(InvalidParameterError):
        pps.perturb(sdf, **{**base, "epsilon": "-1"})
    with pytest.raises(InputDataError, match="no column 'postcode'"):
        pps.perturb(sdf, **{**base, "postcode_column": "postcode"})
    with pytest.raises(InputDataError, match="already has a column named like out_column 'x'"):
        pps.perturb(sdf, **{**base, "out_column": "x"})
    with pytest.raises(InvalidParameterError):
        pps.perturb(sdf, **{**base, "on_error": "skip"})
    with pytest.raises(TypeError):
        pps.perturb(sdf, **{**base, "key": Key.generate().to_file_bytes()})
    with pytest.raises(ArtefactError):
        pps.perturb(sdf, **{**base, "graph": path.with_name("missing.ppgraph")})
    assert tracker.getJobIdsForGroup(group) == []
    spark.sparkContext.setJobGroup("after", "")


def test_streaming_frames_are_refused_on_the_driver_before_any_job(spark, small_graph, tmp_path):
    """A streaming DataFrame cannot be checked whole first, so it is refused with a clear
    error (not Spark's own about queries on streaming sources), and no job runs."""
    _, path = small_graph
    small_records(30, seed=7).to_csv(tmp_path / "part.csv", index=False)
    stream = spark.readStream.schema("sid string, pc string").csv(str(tmp_path))
    assert stream.isStreaming
    tracker = spark.sparkContext.statusTracker()
    group = f"streaming-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "streaming")
    options = dict(epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path)
    with pytest.raises(InvalidParameterError, match="streaming DataFrame") as raised:
        pps.perturb(stream, key=Key.generate(), **options)
    assert "foreachBatch" in str(raised.value)
    with pytest.raises(InvalidParameterError, match="streaming DataFrame"):
        pps.check(stream, **options)
    assert tracker.getJobIdsForGroup(group) == []
    spark.sparkContext.setJobGroup("after", "")


def test_records_are_numbered_as_the_release_reads_them_after_a_round_robin_repartition(
    spark, small_graph
):
    """A round-robin ``repartition(n)`` first sorts the rows by a hash of the columns read; the
    check pass read only the identifier and postcode, so its record numbers (in the error, in
    ``check``) named other rows than the release's (a review).  Both passes now read every
    column: the failing records are named where the release puts their rows."""
    _, path = small_graph
    pdf = small_records(200, seed=51)
    sdf = spark.createDataFrame(pdf).repartition(17)
    options = dict(id_column="sid", postcode_column="pc", graph=path)
    key = Key.generate()
    checked = pps.check(sdf, **options)
    released = pps.perturb(sdf, key=key, epsilon=EPSILON, on_error="null", **options).toPandas()
    failed_rows = [i + 1 for i, code in enumerate(released["postcode_dp"]) if pd.isna(code)]
    assert len(failed_rows) == 4  # (small_records: three bad postcodes and a blank identifier)
    assert [r for r, _ in checked.row_errors] == failed_rows
    with pytest.raises(InputDataError) as refused:
        pps.perturb(sdf, key=key, epsilon=EPSILON, **options)
    assert [r for r, _ in refused.value.row_errors] == failed_rows


def test_duplicate_subjects_warn_like_perturb_frame(spark, small_graph):
    graph, path = small_graph
    pdf = small_records(300, seed=8)
    pdf["sid"] = [f"P{i:04d}" for i in range(300)]
    pdf.loc[250, "sid"] = "P0010"  # a second postcode for a subject first seen in partition 0
    pdf.loc[260, "sid"] = "P0120"
    pdf.loc[250, "pc"], pdf.loc[10, "pc"] = "LS1 1AA", "LS2 2AB"
    pdf.loc[260, "pc"], pdf.loc[120, "pc"] = "LS3 1AA", "LS3 1AB"
    options = dict(
        key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", on_error="null"
    )
    with pytest.warns(DuplicateSubjectWarning) as remote:
        pps.perturb(spark.createDataFrame(pdf), graph=path, **options)
    with pytest.warns(DuplicateSubjectWarning) as local:
        perturb_frame(pdf, graph=graph, **options)
    remote = [str(w.message) for w in remote if w.category is DuplicateSubjectWarning]
    local = [str(w.message) for w in local if w.category is DuplicateSubjectWarning]
    assert remote == local
    assert "2 subject identifier(s)" in remote[0] and "record(s) 251, 261" in remote[0]


# -- the key and the graph ------------------------------------------------------------------------


def test_key_never_appears_in_plans_event_log_or_configuration(
    spark, small_graph, event_log, capsys
):
    _, path = small_graph
    key = Key.generate()
    text = key.to_file_bytes().decode("ascii")
    body = text.splitlines()[1].split(": ", 1)[1]
    material = base64.b64decode(body)
    secrets_ = [
        text,
        body,
        material.hex(),
        material.hex().upper(),
        base64.urlsafe_b64encode(material).decode(),
        repr(material)[2:-1],
    ]
    out = pps.perturb(
        spark.createDataFrame(small_records(60, seed=9)),
        key=key,
        epsilon=EPSILON,
        id_column="sid",
        postcode_column="pc",
        graph=path,
        on_error="null",
    )
    assert out.filter(out.postcode_dp.isNotNull()).count() == 56  # the key did reach the workers
    capsys.readouterr()
    for mode in ("simple", "extended", "codegen", "cost", "formatted"):
        out.explain(mode=mode)
    shown = capsys.readouterr().out
    shown += out._jdf.queryExecution().toString()
    shown += out._jdf.queryExecution().executedPlan().toString()
    shown += repr(out) + str(out.schema)
    shown += "".join(f"{k}={v}" for k, v in spark.sparkContext.getConf().getAll())
    assert "postcode_privacy_release" in shown  # the plan was captured
    for secret in secrets_:
        assert secret not in shown
    # The event log (what the Spark UI and history server show) has the plans of both passes.
    logged = event_log_text(event_log, "postcode_privacy_release", "postcode_privacy_check")
    assert "postcode_privacy_release" in logged and "postcode_privacy_check" in logged
    for secret in secrets_:
        assert secret not in logged
    sealed = shipping._SealedKey(key)
    assert all(secret not in repr(sealed) + str(sealed) for secret in secrets_)


def test_closure_is_small_and_carries_no_graph(small_graph):
    graph, _ = small_graph
    ref = shipping._GraphRef(shipping._artefact_name(graph.sha256), graph.sha256)
    options = ReleaseOptions(
        epsilon=EPSILON, id_column="sid", postcode_column="pc", on_error="null"
    )
    assert pickle.loads(pickle.dumps(options)) == options  # plain values, no key
    spec = tasks._TaskSpec(graph=ref, options=options, expected_radius=3)
    pickled = cloudpickle.dumps(
        release_pass._release_function(
            spec, shipping._SealedKey(Key.generate()), [0, 10, 20], ["sid", "pc"]
        )
    )
    assert len(pickled) < 16_000
    assert graph.label(5).encode() not in pickled  # no node label, so no graph, in the closure


def test_worker_refuses_an_artefact_with_another_hash(spark, small_graph):
    graph, path = small_graph
    ref = shipping._ship_graph(spark, graph, path)
    assert ref.file_name == f"postcode-privacy-graph-{graph.sha256}.ppgraph"
    assert shipping._worker_graph(ref).sha256 == graph.sha256  # the driver can read it too
    with pytest.raises(ArtefactError, match="not the driver's graph"):
        shipping._worker_graph(shipping._GraphRef(ref.file_name, "0" * 64))


# -- the national graph ---------------------------------------------------------------------------


def test_national_graph_identity_and_single_load(spark, national_graph):
    graph = national_graph
    rng = random.Random(11)
    n = 3000
    nodes = [rng.randrange(len(graph)) for _ in range(n)]
    codes = [graph.label(i) for i in nodes]
    codes = [c.lower().replace(" ", "") if i % 3 == 0 else c for i, c in enumerate(codes)]
    ids = [rng.randrange(2000) for _ in range(n)]
    codes[17], codes[2999] = "SW1A", None  # malformed, missing
    pdf = pd.DataFrame({"person": ids, "postcode": codes, "row": range(n)})
    sdf = spark.createDataFrame(pdf)
    key = Key.generate()
    options = dict(
        key=key, epsilon=EPSILON, id_column="person", postcode_column="postcode", on_error="null"
    )

    out = pps.perturb(sdf, **options).toPandas()  # graph=None: the national graph's artefact
    local = perturb_frame(pdf, graph=graph, **options)
    assert_same_release(out, local)
    assert out["postcode_dp"].notna().sum() == n - 2
    assert out["row"].tolist() == list(range(n))

    # The Python workers (reused between tasks) report how often they loaded the 115 MB
    # artefact: once, although each ran several of the 3 partitions x 2 passes.
    def report(batches):
        for _ in batches:
            pass
        yield pd.DataFrame(
            {"loads": [pps.worker_graph_loads().get(graph.sha256, 0)], "pid": [os.getpid()]}
        )

    loads = spark.range(0, 8, 1, 4).mapInPandas(report, "loads int, pid int").toPandas()
    assert loads["loads"].max() == 1


def test_terminated_postcodes_mapped_to_the_nearest_live_one_like_perturb_frame(
    spark, national_graph
):
    from postcode_privacy.release.terminated import NearestLive, bundled_terminated_locations

    graph = national_graph
    terminated = bundled_terminated_locations()["postcode"].tolist()
    rng = random.Random(16)
    codes = [graph.label(rng.randrange(len(graph))) for _ in range(200)]
    for i in (3, 77, 150):
        codes[i] = rng.choice(terminated)
    options = dict(
        key=Key.generate(),
        epsilon=EPSILON,
        id_column="person",
        postcode_column="postcode",
        terminated="nearest",
    )
    # Person 3 is seen at a terminated postcode and at the live one it maps to: one draw, so
    # neither path warns of a subject "released more than once" (local: tests/test_release_files).
    nearest = NearestLive(graph)
    codes[4] = graph.label(nearest.nearest_node(nearest.row_of(codes[3])))
    people = list(range(200))
    people[4] = 3
    pdf = pd.DataFrame({"person": people, "postcode": codes})
    with warnings.catch_warnings():
        warnings.simplefilter("error", DuplicateSubjectWarning)
        out = pps.perturb(spark.createDataFrame(pdf), **options).toPandas()
        local, local_counts = perturb_frame(pdf, graph=graph, with_counts=True, **options)
    assert local_counts["terminated_mapped"] == 3
    assert local_counts["identifiers_with_several_postcodes"] == 0
    assert_same_release(out, local)
    assert out["postcode_dp"][3] == out["postcode_dp"][4]


# -- rough edges: column names, pandas 3, the executors' Python ---------------------------------


def test_column_names_with_dots_and_backticks(spark, small_graph):
    """Spark parses names at a mapInPandas; the library quotes and renames them itself."""
    graph, path = small_graph
    names = {"sid": "person.id", "pc": "post`code", "x": "a.b`c", "w": "`w`"}
    pdf = small_records(300, seed=21).rename(columns=names)
    options = dict(
        key=Key.generate(),
        epsilon=EPSILON,
        id_column="person.id",
        postcode_column="post`code",
        on_error="null",
        out_column="out.put`",
    )
    out = pps.perturb(spark.createDataFrame(pdf), graph=path, **options).toPandas()
    local, local_counts = perturb_frame(pdf, graph=graph, with_counts=True, **options)
    assert list(out.columns) == ["person.id", "a.b`c", "`w`", "out.put`"]
    assert_same_release(out, local)
    summary = pps.check(
        spark.createDataFrame(pdf),
        id_column="person.id",
        postcode_column="post`code",
        graph=path,
        on_error="null",
    )
    assert summary.counts == local_counts


def test_other_columns_pass_through_unchanged_with_pandas_3(spark, small_graph):
    """The Arrow-to-pandas round trip of every column kind the release carries along
    (docs/spark.md, "pandas 3"): values and types come back exactly as Spark holds them."""
    import datetime as dt
    import decimal

    _, path = small_graph
    assert int(pd.__version__.split(".")[0]) >= 3  # the case this test is about
    codes = small_records(40, seed=22)["pc"].tolist()
    rows = [
        (
            f"S{i}",
            codes[i],
            i if i % 5 else None,
            float("nan") if i % 11 == 0 else (i / 3 if i % 7 else None),
            i % 2 == 0,
            dt.date(2026, 1, 1 + i % 28),
            dt.datetime(9999, 12, 31)
            if i % 13 == 0
            else dt.datetime(2026, 3, 1, 12, i % 60, 7, 123456),
            decimal.Decimal(f"{i}.25"),
            "é" * (i % 3) if i % 4 else None,
            bytes([i]),
        )
        for i in range(40)
    ]
    schema = (
        "sid string, pc string, n long, f double, b boolean, d date, t timestamp, "
        "m decimal(10,2), u string, raw binary"
    )
    sdf = spark.createDataFrame(rows, schema)
    out = pps.perturb(
        sdf,
        key=Key.generate(),
        epsilon=EPSILON,
        id_column="sid",
        postcode_column="pc",
        graph=path,
        on_error="null",
    )
    assert out.schema.simpleString() == (
        "struct<sid:string,n:bigint,f:double,b:boolean,d:date,t:timestamp,m:decimal(10,2),"
        "u:string,raw:binary,postcode_dp:string>"
    )
    # NaN is not null, and a timestamp past 2262 is kept (neither crosses into pandas:
    # a hostile review found NaN coming back null and 9999-12-31 failing the release)
    assert out.drop("postcode_dp", "f").collect() == sdf.drop("pc", "f").collect()
    floats = [r["f"] for r in out.select("f").collect()]
    want = [r["f"] for r in sdf.select("f").collect()]
    assert [repr(v) for v in floats] == [repr(v) for v in want]
    assert sum(v != v for v in floats if v is not None) == 4  # the NaNs, still NaN
    assert out.filter(out.postcode_dp.isNull()).count() == 3  # the three failing records


HIDING_PYTHON = """#!{python}
# A Python that cannot import postcode_privacy: what an executor without the package sees.
import runpy
import sys


class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Hide())
if sys.argv[1] == "-m":
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_probe_job_that_spark_itself_fails_names_spark_s_cause_not_python(monkeypatch):
    """Any failure of the one-row probe job was blamed on the executors' Python, with advice to
    reinstall, and Spark's own cause (a file ``sc.addFile`` named that was deleted, say) was
    thrown away (a review).  Spark's cause is now quoted, without that advice; a failure of the
    Python worker still gets it (the test below)."""
    from postcode_privacy.spark import executors

    jvm = (
        "An error occurred while calling o69.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(x.scala:1)\n"
        "Caused by: java.io.FileNotFoundException: File file:/tmp/lookup.txt does not exist\n"
        "\tat org.apache.spark.util.Utils$.fetchFile(Utils.scala:1)\n"
    )

    class Session:
        def range(self, *args):
            raise RuntimeError(jvm)

    with pytest.raises(pps.ExecutorEnvironmentError) as failure:
        executors._probe_executors(Session())
    message = str(failure.value)
    assert "(java.io.FileNotFoundException: File file:/tmp/lookup.txt does not exist)" in message
    assert "not the executors' Python" in message and "PYSPARK_PYTHON" not in message
    python = jvm + "org.apache.spark.api.python.PythonException: Traceback (most recent call last):"
    assert executors._python_failed(RuntimeError(python))
    assert not executors._python_failed(RuntimeError(jvm))


@pytest.mark.parametrize("hidden", ["postcode_privacy", "pyarrow"])
def test_executors_without_the_package_fail_early_naming_pyspark_python(
    spark, small_graph, tmp_path, hidden
):
    """The message names what the executors' Python lacks; without pyarrow, Spark cannot start
    even the probe's plain UDF (it runs them through Arrow), and its first line says nothing."""
    _, path = small_graph
    python = tmp_path / "python-without-package"
    python.write_text(HIDING_PYTHON.format(python=sys.executable, hidden=hidden))
    python.chmod(0o755)
    sdf = spark.createDataFrame(small_records(30, seed=23))
    context = spark.sparkContext
    # Classic PySpark takes the executors' Python from the context when a function is wrapped.
    previous, context.pythonExec = context.pythonExec, str(python)
    try:
        with pytest.raises(pps.ExecutorEnvironmentError) as failure:
            pps.perturb(
                sdf,
                key=Key.generate(),
                epsilon=EPSILON,
                id_column="sid",
                postcode_column="pc",
                graph=path,
                on_error="null",
            )
    finally:
        context.pythonExec = previous
    message = str(failure.value)
    assert "\n" not in message
    assert "PYSPARK_PYTHON" in message
    assert f"ModuleNotFoundError: No module named '{hidden}" in message
    # With the right Python again, the same call works.
    out = pps.perturb(
        sdf,
        key=Key.generate(),
        epsilon=EPSILON,
        id_column="sid",
        postcode_column="pc",
        graph=path,
        on_error="null",
    )
    assert out.count() == 30


def test_probe_reports_another_output_stability_version():
    from postcode_privacy.version import OUTPUT_STABILITY_VERSION

    probe = executors._probe_function
    assert probe(OUTPUT_STABILITY_VERSION)() == ""
    assert "output-stability version" in probe("not-" + OUTPUT_STABILITY_VERSION)()


def test_column_metadata_comes_back_with_every_column(spark, small_graph):
    """Each column keeps its metadata (a comment, ML attributes): the release pass renames the
    columns positionally around ``mapInArrow``, and a hostile review found every column of the
    result without its metadata."""
    from pyspark.sql import functions as F

    _, path = small_graph
    sdf = spark.createDataFrame(small_records(20, seed=40))
    sdf = sdf.select(
        F.col("sid").alias("sid", metadata={"comment": "person"}),
        F.col("pc").alias("pc", metadata={"comment": "true postcode"}),
        F.col("x").alias("x", metadata={"ml_attr": {"type": "numeric", "name": "x"}}),
        "w",
    )
    common = dict(
        key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path
    )
    out = pps.perturb(sdf, on_error="null", **common)
    assert [(f.name, f.metadata) for f in out.schema.fields] == [
        ("sid", {"comment": "person"}),
        ("x", {"ml_attr": {"type": "numeric", "name": "x"}}),
        ("w", {}),
        ("postcode_dp", {}),
    ]
    kept = pps.perturb(sdf, on_error="null", keep_source_postcode=True, **common)
    assert [f.metadata for f in kept.schema.fields] == [f.metadata for f in sdf.schema] + [{}]
    assert kept.drop("postcode_dp").collect() == sdf.collect()


def test_a_column_arrow_cannot_carry_is_refused_before_any_job(spark, small_graph):
    """A column of a type ``mapInArrow`` cannot carry (an interval year to month, bare or
    nested) is refused on the driver with the library's own error naming its position and
    type, before the check pass runs: a hostile review found PySpark's NotImplementedError
    about the internal "o1" column, raised after a whole Spark job."""
    from pyspark.sql import functions as F

    _, path = small_graph
    base = spark.createDataFrame(small_records(10, seed=41)).select("sid", "pc")
    months = F.make_ym_interval(F.lit(1), F.lit(2))
    tracker = spark.sparkContext.statusTracker()
    group = f"arrow-types-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "unsupported column types")
    common = dict(
        key=Key.generate(),
        epsilon=EPSILON,
        id_column="sid",
        postcode_column="pc",
        graph=path,
        on_error="null",  # the failing records of small_records are not the point here
    )
    with pytest.raises(InputDataError, match=r"^column 3 holds intervals that Spark cannot"):
        pps.perturb(base.withColumn("span", months), **common)
    nested = base.withColumn("spans", F.array(months))
    with pytest.raises(InputDataError, match=r"^column 3 holds lists that Spark cannot"):
        pps.check(nested, id_column="sid", postcode_column="pc", graph=path)
    # A struct's type text lists its fields' names, the input's own: never quoted.
    named = base.withColumn("s", F.struct(months.alias("SECRETFIELD")))
    with pytest.raises(InputDataError, match=r"^column 3 holds structs that") as refused:
        pps.check(named, id_column="sid", postcode_column="pc", graph=path)
    assert "SECRETFIELD" not in str(refused.value)
    # Two fields of one name pass PySpark's conversion but not the JVM's, which failed the
    # write after the check pass, quoting the names (a hostile review of round 27).
    twice = F.struct(F.lit(1).alias("SECRETFIELD"), F.lit(2).alias("SECRETFIELD"))
    for column in (twice, F.array(twice), F.create_map(F.lit("k"), F.struct(twice.alias("x")))):
        with pytest.raises(
            InputDataError, match=r"^column 3 holds structs with two fields of"
        ) as refused:
            pps.perturb(base.withColumn("s", column), **common)
        assert "SECRETFIELD" not in str(refused.value)
    assert tracker.getJobIdsForGroup(group) == []
    distinct = F.struct(F.lit(1).alias("a"), F.lit(2).alias("A"))  # case differs: Arrow takes it
    released = pps.perturb(base.withColumn("s", F.array(distinct)), **common)
    assert released.select("s").collect() == base.select(F.array(distinct).alias("s")).collect()
    spark.sparkContext.setJobGroup("after", "")


def test_a_postcode_column_that_is_not_text_is_refused_before_any_job(spark, small_graph):
    """Postcodes stored as bytes (Spark without ``binaryAsString``), numbers or lists had every
    record refused as not a postcode; they are refused on the driver naming the column's type,
    as a Parquet file's are (a hostile review)."""
    from pyspark.sql import functions as F

    _, path = small_graph
    base = spark.createDataFrame(small_records(10, seed=43)).select("sid", "pc")
    tracker = spark.sparkContext.statusTracker()
    group = f"postcode-types-{uuid.uuid4().hex}"
    spark.sparkContext.setJobGroup(group, "postcode column types")
    common = dict(key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc")
    for column, words in (
        (F.col("pc").cast("binary"), "binary values"),
        (F.length("pc"), "whole numbers"),
        (F.array("pc"), "lists"),
    ):
        wrong = base.withColumn("pc", column)
        expected = f"^the postcode column \\(postcode_column\\) holds {words}, not text"
        with pytest.raises(InputDataError, match=expected):
            pps.perturb(wrong, graph=path, **common)
        with pytest.raises(InputDataError, match=expected):
            pps.check(wrong, id_column="sid", postcode_column="pc", graph=path)
    assert tracker.getJobIdsForGroup(group) == []
    spark.sparkContext.setJobGroup("after", "")


def test_a_narrow_float_identifier_is_refused_by_record_like_perturb_frame(spark, small_graph):
    """Spark's FloatType arrives as 32-bit floats, which hold every integer only below 2^24:
    ids 16777216 and 16777217 both read as 16777216 and were released as one person (a hostile
    review of round 29). The check pass refuses them by record, as perturb_frame does."""
    import numpy as np

    graph, path = small_graph
    ids = np.array([2**24 - 1, 2**24, 2**24 + 2, 7], dtype=np.float32)
    pdf = pd.DataFrame({"sid": ids, "pc": ["LS1 1AA", "LS1 1AB", "LS1 1AC", "LS1 1AD"]})
    sdf = spark.createDataFrame(pdf)
    assert sdf.schema["sid"].dataType.typeName() == "float"
    options = dict(
        key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", on_error="null"
    )
    out = pps.perturb(sdf, graph=path, **options).toPandas()
    local = perturb_frame(pdf, graph=graph, **options)
    assert_same_release(out, local)
    assert out["postcode_dp"].notna().tolist() == [True, False, False, True]
    with pytest.raises(
        InputDataError, match=r"\[record 2: [^;]*too large[^;]*; record 3: "
    ) as refused:
        pps.perturb(sdf, graph=path, **{**options, "on_error": "error"})
    assert "16777216" not in str(refused.value)


def test_a_library_error_on_an_executor_fails_the_check_pass_as_that_error(spark, small_graph):
    """An executor whose graph is not the driver's fails the check pass (which ``perturb`` and
    ``check`` run at once) with the library's ``ArtefactError`` and its message, not Spark's
    ``PythonException`` holding a worker traceback (a hostile review of round 22)."""
    from dataclasses import replace

    _, path = small_graph
    sdf = spark.createDataFrame(small_records(30, seed=42))
    spec = pps._prepare(
        sdf, key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path
    )
    elsewhere = replace(spec, graph=shipping._GraphRef(spec.graph.file_name, "0" * 64))
    with pytest.raises(ArtefactError) as failure:
        check_pass._run_check(sdf, elsewhere)
    assert str(failure.value) == (
        "the graph artefact on this executor is not the driver's graph (its sha256 differs)"
    )
    assert failure.value.__cause__ is None and failure.value.__suppress_context__


def test_library_errors_are_found_only_as_the_workers_last_library_error():
    """What ``_library_error`` rebuilds from Spark's text, and what it leaves alone."""
    trace = (
        "Traceback (most recent call last):\n  File ...\n"
        "postcode_privacy.errors.InvalidParameterError: the radius on this executor differs\n"
    )
    rebuilt = executors._library_error(RuntimeError(trace))
    assert type(rebuilt) is InvalidParameterError
    assert str(rebuilt) == "the radius on this executor differs"
    assert executors._library_error(RuntimeError("ValueError: no")) is None
    assert executors._library_error(RuntimeError("postcode_privacy.errors.Graph: x")) is None
    assert (
        executors._library_error(RuntimeError("postcode_privacy.errors.DuplicateSubjectWarning: x"))
        is None
    )


def test_text_that_is_not_utf8_is_refused_naming_the_record_never_quoting_it(
    spark, small_graph, tmp_path, event_log
):
    """Spark does not check that text read from Parquet (or cast from binary) is UTF-8, and
    pyarrow's conversion of such a value failed quoting it, in the exception and in the
    event log, under every error policy.  It is refused as the library's error instead,
    naming the record by its place in its partition and never quoting it (hostile review of
    round 24)."""
    from pathlib import Path

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    _, path = small_graph
    pdf = small_records(12, seed=3).head(6)
    secret = f"QZ{uuid.uuid4().hex[:12]}"  # found nowhere else, if it is ever quoted
    ids = pa.array(pdf["sid"].tolist(), type=pa.string())
    bad = [str(v).encode() for v in pdf["pc"]]
    bad[2] = secret.encode() + b"\xff"
    postcodes = pa.Array.from_buffers(
        pa.string(),
        len(bad),
        [
            None,
            pa.py_buffer(np.cumsum([0] + [len(b) for b in bad]).astype(np.int32).tobytes()),
            pa.py_buffer(b"".join(bad)),
        ],
    )
    source = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"sid": ids, "pc": postcodes}), source)
    sdf = spark.read.parquet(str(source)).coalesce(1)
    options = dict(
        key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path
    )
    for on_error in ("error", "null", "drop"):
        with pytest.raises(InputDataError) as failure:
            pps.perturb(sdf, **options, on_error=on_error)
        assert str(failure.value) == (
            "record 3 of Spark partition 0: its postcode is text that is not valid UTF-8"
        )
        assert secret not in str(failure.value)
    logged = "".join(
        p.read_text(errors="replace") for p in Path(event_log).rglob("*") if p.is_file()
    )
    assert secret not in logged


def test_a_check_with_no_failing_record_has_no_error():
    """``SparkCheck.error()`` returned "0 of 5 records cannot be released ()" for a clean
    check; ``perturb`` raises nothing then (a hostile review of round 29)."""
    from postcode_privacy.spark.check_pass import SparkCheck

    clean = SparkCheck(counts={"records": 5, "failed": 0}, row_errors=[], partition_records=[5])
    assert clean.error() is None
    failing = SparkCheck(
        counts={"records": 5, "failed": 1, "malformed_postcode": 1},
        row_errors=[(3, "not a UK postcode in form")],
        partition_records=[5],
    )
    assert "1 of 5 records cannot be released" in str(failing.error())
