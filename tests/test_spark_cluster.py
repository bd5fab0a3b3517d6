"""The Spark path on a real standalone cluster: a master and one worker started here, bound to
127.0.0.1, each a separate JVM; the worker starts an executor JVM with its own Python workers."""

from __future__ import annotations

import os
import sys
import warnings

import pytest
from optional import require, require_java

require("pyspark", "pip install '.[spark]'")
require_java()
from spark_helpers import (
    EPSILON,
    PANDAS3_COPY,
    PANDAS3_NOTICE,
    csv_input,
    records,
    source_path,
    worker_report,
)
from spark_helpers import small_graph as make_small_graph

from postcode_privacy import Key, perturb_frame
from postcode_privacy import spark as pps
from postcode_privacy.spark import local_services

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
def cluster(tmp_path_factory):
    env = {"PYSPARK_PYTHON": sys.executable, "PYTHONPATH": source_path()}
    started = local_services.start_standalone(
        tmp_path_factory.mktemp("standalone"), cores=1, memory="768m", env=env
    )
    try:
        yield started
    finally:
        started.stop()
        assert started.master.process.poll() is not None
        assert started.worker.process.poll() is not None


@pytest.fixture(scope="module")
def spark(cluster):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        session = (
            SparkSession.builder.master(cluster.url)
            .appName("postcode-privacy-standalone-test")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.host", local_services.HOST)
            .config("spark.driver.bindAddress", local_services.HOST)
            .config("spark.executor.memory", "512m")
            .config("spark.executor.cores", "1")
            .config("spark.cores.max", "1")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.executorEnv.PYTHONPATH", source_path())
            .getOrCreate()
        )
    try:
        yield session
    finally:
        session.stop()


def as_bytes(column) -> bytes:
    """The released column as one UTF-8 text, failed records as empty lines."""
    return "\n".join(v if isinstance(v, str) else "" for v in column).encode()


def test_multi_partition_release_on_a_standalone_cluster(spark, cluster, tmp_path):
    graph, path = make_small_graph(tmp_path)
    csv, local_input = csv_input(tmp_path, 2000, seed=41)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "16000")
    sdf = spark.read.csv(str(csv), header=True)
    partitions = sdf.rdd.getNumPartitions()
    assert partitions >= 3
    options = dict(
        key=Key.generate(), epsilon=EPSILON, id_column="sid", postcode_column="pc", on_error="null"
    )
    out = pps.perturb(sdf, graph=path, **options).toPandas()
    local = perturb_frame(local_input, graph=graph, **options)
    assert list(out.columns) == list(local.columns)
    assert records(out) == records(local)
    assert as_bytes(out["postcode_dp"]) == as_bytes(local["postcode_dp"])
    assert out["postcode_dp"].notna().sum() == 1996

    # The Python workers ran below the standalone worker's JVM (in the executor JVM it
    # started), not below the driver's JVM, and each loaded the artefact once although it
    # served every task of both passes.
    driver_jvm = spark.sparkContext._gateway.proc.pid
    report = worker_report(spark, 2, graph.sha256)
    for chain in report["ancestors"]:
        pids = [int(p) for p in chain.split()]
        assert cluster.worker.pid in pids and pids.index(cluster.worker.pid) >= 2
        assert driver_jvm not in pids and os.getpid() != pids[0]
    assert set(report["loads"]) == {1}
    assert report.groupby("pid")["tasks"].max().sum() >= 2 * partitions
