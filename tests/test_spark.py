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
import random
import sys
import uuid
import warnings

import pandas as pd
import pytest
from optional import require

from postcode_privacy import Graph, InputDataError, InvalidParameterError, Key, perturb_frame
from postcode_privacy.errors import ArtefactError
from postcode_privacy.release.plan import DuplicateSubjectWarning

require("pyspark", "pip install '.[spark]'")
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from postcode_privacy import spark as pps  # noqa: E402  (imports PySpark)

# The random records below reuse identifiers at several postcodes, which warns by design;
# test_duplicate_subjects_warn_like_perturb_frame asserts that warning (pytest.warns still sees it).
pytestmark = pytest.mark.filterwarnings(
    "ignore::postcode_privacy.release.plan.DuplicateSubjectWarning")

EPSILON = "2"
LETTERS = "ABDEFGHJLNPQRSTUWXYZ"


@pytest.fixture(scope="module")
def event_log(tmp_path_factory):
    return tmp_path_factory.mktemp("spark-events")


@pytest.fixture(scope="module")
def spark(event_log):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # PySpark's notice about pandas 3
        session = (SparkSession.builder.master("local[2]")
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
                   .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _quiet_pandas3_notice():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas",
                                category=FutureWarning)
        yield


def small_codes() -> list[str]:
    return [f"LS{d} {s}{a}{b}" for d in range(1, 4) for s in range(1, 3)
            for a in LETTERS[:4] for b in LETTERS[:5]]


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory):
    """120 postcodes on a ladder-like graph with an uneven prior; saved as an artefact."""
    codes = small_codes()
    n = len(codes)
    edges = [(i, i + 1) for i in range(n - 1)] + [(i, i + 7) for i in range(n - 7)]
    graph = Graph.from_edges(codes, edges, prior=[1 + (i * 7) % 5 for i in range(n)])
    path = tmp_path_factory.mktemp("graph") / "small.ppgraph"
    graph.save(path)
    return graph, path


def small_records(n: int, seed: int) -> pd.DataFrame:
    """Records in messy but valid form, with a few failing rows spread over the input."""
    rng = random.Random(seed)
    codes = small_codes()
    rows = []
    for i in range(n):
        code = rng.choice(codes)
        code = rng.choice([code, code.lower(), code.replace(" ", ""), f"  {code} "])
        rows.append({"sid": f"S{rng.randrange(n // 2):05d}", "pc": code, "x": i * 3,
                     "w": rng.random()})
    for i, bad in ((7, "not a postcode"), (n // 2, None), (n - 3, "ZZ9 9ZZ")):
        rows[i]["pc"] = bad
    rows[n // 3]["sid"] = "   "
    return pd.DataFrame(rows)


def records(frame: pd.DataFrame) -> list[tuple]:
    """Rows as tuples with every kind of missing value as None, for exact comparison."""
    return [tuple(None if (v is None or (not isinstance(v, str) and pd.isna(v))) else v
                  for v in row) for row in frame.itertuples(index=False)]


def assert_same_release(spark_out: pd.DataFrame, local_out: pd.DataFrame) -> None:
    assert list(spark_out.columns) == list(local_out.columns)
    assert records(spark_out) == records(local_out)


# -- identity with perturb_frame ----------------------------------------------------------------


@pytest.mark.parametrize("on_error, keep, out_column, as_path", [
    ("null", False, "postcode_dp", True),
    ("drop", True, "released", False),
])
def test_same_output_as_perturb_frame(spark, small_graph, on_error, keep, out_column, as_path):
    graph, path = small_graph
    pdf = small_records(600, seed=1)
    sdf = spark.createDataFrame(pdf)
    assert sdf.rdd.getNumPartitions() == 3
    key = Key.generate()
    options = dict(key=key, epsilon=EPSILON, id_column="sid", postcode_column="pc",
                   on_error=on_error, keep_source_postcode=keep, out_column=out_column)
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
    small_records(400, seed=12).to_csv(tmp_path / "in.csv", index=False)
    code = main(["perturb", str(tmp_path / "in.csv"), "-o", str(tmp_path / "out.csv"), "--key",
                 str(tmp_path / "key"), "--epsilon", EPSILON, "--id-column", "sid",
                 "--postcode-column", "pc", "--graph", str(path), "--on-error", "null", "-q"])
    assert code == 0
    cli = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    sdf = spark.read.csv(str(tmp_path / "in.csv"), header=True)
    out = pps.perturb(sdf, key=key, epsilon=EPSILON, id_column="sid", postcode_column="pc",
                      graph=path, on_error="null").toPandas()
    assert out["sid"].fillna("").tolist() == cli["sid"].tolist()
    assert out["postcode_dp"].fillna("").tolist() == cli["postcode_dp"].tolist()
    assert (cli["postcode_dp"] == "").sum() == 4


def test_key_changes_output_and_repartitioning_does_not(spark, small_graph):
    graph, path = small_graph
    pdf = small_records(300, seed=2)
    sdf = spark.createDataFrame(pdf)
    options = dict(epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path,
                   on_error="null")
    key = Key.generate()
    first = pps.perturb(sdf, key=key, **options).toPandas()
    coalesced = pps.perturb(sdf.coalesce(1), key=key, **options).toPandas()
    other = pps.perturb(sdf, key=Key.generate(), **options).toPandas()
    assert records(first) == records(coalesced)
    assert (first["postcode_dp"] != other["postcode_dp"]).sum() > 100


def test_batch_and_chunk_sizes_do_not_change_the_output(spark, small_graph):
    graph, path = small_graph
    pdf = small_records(700, seed=15)
    options = dict(key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc",
                   on_error="drop")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "40")
    try:
        sdf = spark.createDataFrame(pdf)
        prepared = pps._prepare(sdf, graph=path, radius=None, out_column="postcode_dp",
                                keep_source_postcode=False, terminated="error", **options)
        offsets = pps._run_check(sdf, prepared).offsets
        out = pps._release_frame(sdf, prepared, pps._SealedKey(options["key"]), offsets,
                                 chunk=100).toPandas()  # chunks of three batches of 40
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert_same_release(out, perturb_frame(pdf, graph=graph, **options))


def test_chunks_regroup_batches_in_order_with_single_chunk_arrow_columns():
    import pyarrow as pa

    batches = [pd.DataFrame({"a": range(i * 10, i * 10 + n),
                             "s": pd.array([f"v{i}{j}" for j in range(n - 1)] + [None],
                                           dtype="string[pyarrow]")})
               for i, n in enumerate([4, 3, 5, 2])]
    chunks = list(pps._chunks(iter(batches), 6))
    assert [len(c) for c in chunks] == [7, 7]
    assert records(pd.concat(chunks)) == records(pd.concat(batches))
    for chunk in chunks:
        assert chunk["s"].dtype == batches[0]["s"].dtype
        assert pa.chunked_array(chunk["s"].array.__arrow_array__()).num_chunks == 1
    assert list(pps._chunks(iter([]), 6)) == []


def test_check_reports_the_counts_of_perturb_frame(spark, small_graph):
    graph, path = small_graph
    pdf = small_records(450, seed=3)
    result = pps.check(spark.createDataFrame(pdf), id_column="sid", postcode_column="pc",
                       graph=path, on_error="drop")
    local = perturb_frame(pdf, key=Key.generate(), epsilon=EPSILON, id_column="sid",
                          postcode_column="pc", graph=graph, on_error="drop")
    assert result.counts == local.attrs["postcode_privacy"]["counts"]
    assert len(result.partition_records) == 3 and sum(result.partition_records) == 450
    assert result.offsets == [0, result.partition_records[0], sum(result.partition_records[:2])]


def test_empty_frame(spark, small_graph):
    _, path = small_graph
    sdf = spark.createDataFrame(small_records(30, seed=4)).limit(0)
    out = pps.perturb(sdf, key=Key.generate(), epsilon=EPSILON, id_column="sid",
                      postcode_column="pc", graph=path)
    assert out.columns == ["sid", "x", "w", "postcode_dp"]
    assert out.count() == 0


def test_release_does_not_fork_engine_processes_inside_spark_workers(spark, small_graph):
    """Spark runs one Python worker per task slot; the engine must not add a process per CPU."""
    from postcode_privacy.engine.batch import PARALLEL_MIN

    _, path = small_graph
    n = PARALLEL_MIN + 500  # one batch large enough for the engine's worker processes
    sdf = spark.createDataFrame(small_records(n, seed=14)).coalesce(1)
    options = pps._prepare(sdf, key=Key.generate(), epsilon=EPSILON, id_column="sid",
                           postcode_column="pc", graph=path, radius=None, on_error="null",
                           out_column="postcode_dp", keep_source_postcode=False,
                           terminated="error")
    sealed = pps._SealedKey(Key.generate())

    def release_counting_forks(batches):
        forks = []
        os.register_at_fork(before=lambda: forks.append(1))
        rows = sum(len(out) for out in pps._release_partition(options, sealed, [0], batches))
        yield pd.DataFrame({"rows": [rows], "forks": [len(forks)]})

    result = sdf.mapInPandas(release_counting_forks, "rows long, forks long").toPandas()
    assert result["rows"].tolist() == [n]
    assert result["forks"].tolist() == [0]


# -- input rules and error policies ---------------------------------------------------------------


def test_error_policy_names_global_records_like_perturb_frame(spark, small_graph):
    graph, path = small_graph
    pdf = small_records(900, seed=5)
    for i in [5, 12, 320, *range(610, 640)]:  # failures in every partition
        pdf.loc[i, "pc"] = "AB1"
    sdf = spark.createDataFrame(pdf)
    options = dict(key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc",
                   graph=path)
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
    options = pps._prepare(clean, key=Key.generate(), epsilon=EPSILON, id_column="sid",
                           postcode_column="pc", graph=path, radius=None, on_error="error",
                           out_column="postcode_dp", keep_source_postcode=False,
                           terminated="error")
    offsets = pps._run_check(clean, options).offsets
    assert offsets == [0, 300, 600]
    pdf.loc[[640, 650], "pc"] = "not a postcode"  # the input changes after its check
    changed = spark.createDataFrame(pdf)
    released = pps._release_frame(changed, options, pps._SealedKey(Key.generate()), offsets)
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
    base = dict(key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc",
                graph=path)
    with pytest.raises(InvalidParameterError):
        pps.perturb(sdf, **{**base, "epsilon": "-1"})
    with pytest.raises(InputDataError, match="no column 'postcode'"):
        pps.perturb(sdf, **{**base, "postcode_column": "postcode"})
    with pytest.raises(InputDataError, match="already has a column named 'x'"):
        pps.perturb(sdf, **{**base, "out_column": "x"})
    with pytest.raises(InvalidParameterError):
        pps.perturb(sdf, **{**base, "on_error": "skip"})
    with pytest.raises(TypeError):
        pps.perturb(sdf, **{**base, "key": Key.generate().to_file_bytes()})
    with pytest.raises(ArtefactError):
        pps.perturb(sdf, **{**base, "graph": path.with_name("missing.ppgraph")})
    assert tracker.getJobIdsForGroup(group) == []
    spark.sparkContext.setJobGroup("after", "")


def test_duplicate_subjects_warn_like_perturb_frame(spark, small_graph):
    graph, path = small_graph
    pdf = small_records(300, seed=8)
    pdf["sid"] = [f"P{i:04d}" for i in range(300)]
    pdf.loc[250, "sid"] = "P0010"  # a second postcode for a subject first seen in partition 0
    pdf.loc[260, "sid"] = "P0120"
    pdf.loc[250, "pc"], pdf.loc[10, "pc"] = "LS1 1AA", "LS2 2AB"
    pdf.loc[260, "pc"], pdf.loc[120, "pc"] = "LS3 1AA", "LS3 1AB"
    options = dict(key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc",
                   on_error="null")
    with pytest.warns(DuplicateSubjectWarning) as remote:
        pps.perturb(spark.createDataFrame(pdf), graph=path, **options)
    with pytest.warns(DuplicateSubjectWarning) as local:
        perturb_frame(pdf, graph=graph, **options)
    remote = [str(w.message) for w in remote if w.category is DuplicateSubjectWarning]
    local = [str(w.message) for w in local if w.category is DuplicateSubjectWarning]
    assert remote == local
    assert "2 subject identifier(s)" in remote[0] and "record(s) 251, 261" in remote[0]


# -- the key and the graph ------------------------------------------------------------------------


def test_key_never_appears_in_plans_event_log_or_configuration(spark, small_graph, event_log,
                                                               capsys):
    _, path = small_graph
    key = Key.generate()
    text = key.to_file_bytes().decode("ascii")
    body = text.splitlines()[1].split(": ", 1)[1]
    material = base64.b64decode(body)
    secrets_ = [text, body, material.hex(), material.hex().upper(),
                base64.urlsafe_b64encode(material).decode(), repr(material)[2:-1]]
    out = pps.perturb(spark.createDataFrame(small_records(60, seed=9)), key=key,
                      epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path,
                      on_error="null")
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
    logged = "".join(path.read_text(errors="replace") for path in event_log.rglob("*")
                     if path.is_file())
    assert "postcode_privacy_release" in logged and "postcode_privacy_check" in logged
    for secret in secrets_:
        assert secret not in logged
    sealed = pps._SealedKey(key)
    assert all(secret not in repr(sealed) + str(sealed) for secret in secrets_)


def test_closure_is_small_and_carries_no_graph(small_graph):
    graph, _ = small_graph
    ref = pps._GraphRef(pps._artefact_name(graph.sha256), graph.sha256)
    options = pps._Options(graph=ref, epsilon=EPSILON, radius=None, expected_radius=3,
                           id_column="sid", postcode_column="pc", on_error="null",
                           out_column="postcode_dp", keep_source_postcode=False,
                           terminated="error")
    pickled = cloudpickle.dumps(pps._release_function(options, pps._SealedKey(Key.generate()),
                                                      [0, 10, 20]))
    assert len(pickled) < 16_000
    assert graph.label(5).encode() not in pickled  # no node label, so no graph, in the closure


def test_worker_refuses_an_artefact_with_another_hash(spark, small_graph):
    graph, path = small_graph
    ref = pps._ship_graph(spark.sparkContext, graph, path)
    assert ref.file_name == f"postcode-privacy-graph-{graph.sha256}.ppgraph"
    assert pps._worker_graph(ref).sha256 == graph.sha256  # the driver can read it too
    with pytest.raises(ArtefactError, match="not the driver's graph"):
        pps._worker_graph(pps._GraphRef(ref.file_name, "0" * 64))


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
    options = dict(key=key, epsilon=EPSILON, id_column="person", postcode_column="postcode",
                   on_error="null")

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
        yield pd.DataFrame({"loads": [pps.worker_graph_loads().get(graph.sha256, 0)],
                            "pid": [os.getpid()]})

    loads = spark.range(0, 8, 1, 4).mapInPandas(report, "loads int, pid int").toPandas()
    assert loads["loads"].max() == 1


def test_terminated_postcodes_mapped_to_the_nearest_live_one_like_perturb_frame(spark,
                                                                               national_graph):
    from postcode_privacy.release.terminated import bundled_terminated_locations

    graph = national_graph
    terminated = bundled_terminated_locations()["postcode"].tolist()
    rng = random.Random(16)
    codes = [graph.label(rng.randrange(len(graph))) for _ in range(200)]
    for i in (3, 77, 150):
        codes[i] = rng.choice(terminated)
    pdf = pd.DataFrame({"person": range(200), "postcode": codes})
    options = dict(key=Key.generate(), epsilon=EPSILON, id_column="person",
                   postcode_column="postcode", terminated="nearest")
    out = pps.perturb(spark.createDataFrame(pdf), **options).toPandas()
    local = perturb_frame(pdf, graph=graph, **options)
    assert local.attrs["postcode_privacy"]["counts"]["terminated_mapped"] == 3
    assert_same_release(out, local)
