"""The Spark path on a Spark Connect session: a local Connect server started here, bound to
127.0.0.1, with its own JVM and Python workers; the client has no SparkContext."""

from __future__ import annotations

import base64
import os
import sys
import warnings

import pandas as pd
import pytest
from optional import require, require_java

require("pyspark", "pip install '.[spark]'")
require_java()
from spark_helpers import (
    EPSILON,
    PANDAS3_COPY,
    PANDAS3_NOTICE,
    assert_same_release,
    csv_input,
    event_log_text,
    source_path,
    worker_report,
)
from spark_helpers import small_graph as make_small_graph

from postcode_privacy import Key, perturb_frame
from postcode_privacy import spark as pps
from postcode_privacy.spark import check_pass, executors, local_services, shipping

# The generated records reuse identifiers at several postcodes, which warns by design (its
# own test is in test_spark.py).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.filterwarnings(PANDAS3_NOTICE),
    pytest.mark.filterwarnings(PANDAS3_COPY),
    pytest.mark.filterwarnings("ignore::postcode_privacy.errors.DuplicateSubjectWarning"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    work = tmp_path_factory.mktemp("connect")
    events = work / "events"
    events.mkdir()
    service = local_services.start_connect_server(
        work,
        master="local[1]",
        driver_memory="768m",
        conf={
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false",
            "spark.ui.showConsoleProgress": "false",
        },
        env={"PYSPARK_PYTHON": sys.executable, "PYTHONPATH": source_path()},
    )
    try:
        yield service, events
    finally:
        service.stop()


@pytest.fixture(scope="module")
def spark(server):
    from pyspark.sql import SparkSession

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        session = SparkSession.builder.remote(local_services.connect_url(server[0])).create()
    try:
        yield session
    finally:
        session.stop()
        # builder.remote() switches this whole process to Spark Connect through an environment
        # variable; later classic sessions (and child processes) must not inherit it.
        for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE"):
            os.environ.pop(name, None)


def test_release_on_spark_connect_equals_perturb_frame(spark, server, tmp_path):
    assert shipping._is_connect(spark)
    graph, path = make_small_graph(tmp_path)
    names = {"sid": "person.id", "pc": "post`code"}
    csv, local_input = csv_input(tmp_path, 900, seed=31, columns=names)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "12000")  # one file, three partitions
    sdf = spark.read.csv(str(csv), header=True)
    key = Key.generate()
    options = dict(
        key=key,
        epsilon=EPSILON,
        id_column="person.id",
        postcode_column="post`code",
        on_error="null",
    )
    released = pps.perturb(sdf, graph=path, **options)
    out = released.toPandas()
    local = perturb_frame(local_input, graph=graph, **options)
    assert_same_release(out, local)
    assert out["postcode_dp"].notna().sum() == 896
    partitions = pps.check(
        sdf, id_column="person.id", postcode_column="post`code", graph=path, on_error="null"
    ).partition_records
    assert len(partitions) >= 2 and sum(partitions) == 900

    # The artefact went up with addArtifacts and was loaded once per Python worker.
    report = worker_report(spark, 2, graph.sha256)
    assert set(report["loads"]) == {1}
    assert report["tasks"].max() > 2  # the same worker served several tasks

    # The key is in no plan, explain mode, configuration or the server's event log.
    material = base64.b64decode(
        key.to_file_bytes().decode("ascii").splitlines()[1].split(": ", 1)[1]
    )
    secrets_ = [
        key.to_file_bytes().decode("ascii"),
        material.hex(),
        base64.b64encode(material).decode(),
        base64.urlsafe_b64encode(material).decode(),
    ]
    shown = "".join(
        released._explain_string(mode=mode)
        for mode in ("simple", "extended", "codegen", "cost", "formatted")
    )
    shown += str(spark.conf.getAll) + repr(released) + str(released.schema)
    assert "postcode_privacy_release" in shown
    logged = event_log_text(server[1], "postcode_privacy_release")
    assert "postcode_privacy_release" in logged
    for secret in secrets_:
        assert secret not in shown and secret not in logged


def test_executor_probe_runs_on_spark_connect(spark):
    executors._probe_executors(spark)  # the package imports on the server's Python workers
    frame = spark.createDataFrame(pd.DataFrame({"id": ["a"], "postcode": ["LS1 1AA"]}))
    assert shipping._session_id(frame.sparkSession) == spark.session_id


def test_metadata_types_and_worker_errors_on_spark_connect(spark, tmp_path):
    """On Spark Connect as locally: every column keeps its metadata, a column Arrow cannot
    carry is refused on the client by position and type, and a library error raised on an
    executor in the check pass arrives as that error (not a gRPC-wrapped traceback)."""
    from dataclasses import replace

    from pyspark.sql import functions as F

    from postcode_privacy import InputDataError
    from postcode_privacy.errors import ArtefactError

    _, path = make_small_graph(tmp_path)
    sdf = spark.createDataFrame(pd.DataFrame({"sid": ["a", "b"], "pc": ["LS1 1AA", "LS2 2BD"]}))
    sdf = sdf.select(F.col("sid").alias("sid", metadata={"comment": "person"}), "pc")
    common = dict(
        key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", graph=path
    )
    out = pps.perturb(sdf, **common)
    assert [(f.name, f.metadata) for f in out.schema.fields] == [
        ("sid", {"comment": "person"}),
        ("postcode_dp", {}),
    ]
    months = sdf.withColumn("span", F.make_ym_interval(F.lit(1), F.lit(2)))
    with pytest.raises(InputDataError, match=r"^column 3 holds intervals that Spark cannot "):
        pps.perturb(months, **common)
    spec = pps._prepare(sdf, **common)
    elsewhere = replace(spec, graph=shipping._GraphRef(spec.graph.file_name, "0" * 64))
    with pytest.raises(ArtefactError, match=r"^the graph artefact on this executor is not the"):
        check_pass._run_check(sdf, elsewhere)
    # text that is not UTF-8 (a cast from binary) is refused naming its record, never quoted
    bad = sdf.withColumn("pc", F.expr("CAST(X'515A37375146FF' AS STRING)")).coalesce(1)
    with pytest.raises(InputDataError) as failure:
        pps.perturb(bad, **common)
    assert str(failure.value) == (
        "record 1 of Spark partition 0: its postcode is text that is not valid UTF-8"
    )
