"""Throughput and memory of the Spark path on local, standalone and Spark Connect sessions,
against ``perturb_frame`` and the CLI on the same records.

Usage (from an activated virtual environment with the ``spark`` extra)::

    python benchmarks/spark_local.py --rows 50000 --epsilon 1 --modes local,standalone,connect
    python benchmarks/spark_local.py --smoke        # tiny: a small graph, local mode, < 1 min

Records are ``--rows`` postcodes drawn uniformly from the national graph (a 120-postcode graph
with ``--smoke``), one subject each, a quarter in lower case without the space; they are written
to one CSV file, which the CLI and every Spark session read.  For each mode and each
``--partition-sizes`` value, the records are read in partitions of about that many records and
released to Spark's ``noop`` sink (the check pass included); the released column is collected
once per mode and must equal ``perturb_frame``'s.

Reported per run: wall seconds, records per second, records per second per executor core (the
per-partition throughput, comparable with the CLI's single-process rate), and the peak resident
memory (VmHWM) of the largest Python worker so far.  Python workers are reused, so runs go from
small to large partitions and the peak after each run is that partition size's.  Modes:

* ``local``: ``local[cores]`` in this process's JVM;
* ``standalone``: a master and one worker with ``cores`` cores started here on 127.0.0.1
  (``postcode_privacy.spark.local_services``), one executor JVM;
* ``connect``: a Spark Connect server (``local[cores]``) started here on 127.0.0.1; this
  process is a thin client.

Every service is stopped by process id before the script ends, also on failure.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

_CLI = "from postcode_privacy.cli import entry_point; entry_point()"


def _peak_memory_report(batches):
    """Run on executors: this Python worker's peak resident memory in MiB."""
    import pandas as pd

    for _ in batches:
        pass
    with open("/proc/self/status") as handle:
        peak = next(int(line.split()[1]) for line in handle if line.startswith("VmHWM"))
    yield pd.DataFrame({"pid": [os.getpid()], "peak_mib": [peak / 1024]})


def _small_graph(directory: Path):
    from postcode_privacy import Graph

    letters = "ABDEFGHJLN"
    codes = [
        f"LS{d} {s}{a}{b}"
        for d in range(1, 4)
        for s in range(1, 3)
        for a in letters[:4]
        for b in letters[:5]
    ]
    edges = [(i, i + 1) for i in range(len(codes) - 1)]
    edges += [(i, i + 7) for i in range(len(codes) - 7)]
    graph = Graph.from_edges(codes, edges)
    path = directory / "small.ppgraph"
    graph.save(path)
    return graph, path


def _session(mode: str, cores: int, work: Path, stack: list):
    from pyspark.sql import SparkSession

    from postcode_privacy.spark import local_services

    env = {"PYSPARK_PYTHON": sys.executable}
    if mode == "connect":
        server = local_services.start_connect_server(
            work / "connect", master=f"local[{cores}]", driver_memory="1g", env=env
        )
        stack.append(server.stop)
        session = SparkSession.builder.remote(local_services.connect_url(server)).create()
        stack.append(session.stop)
        return session
    builder = (
        SparkSession.builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
    )
    if mode == "standalone":
        cluster = local_services.start_standalone(
            work / "standalone", cores=cores, memory="1g", env=env
        )
        stack.append(cluster.stop)
        builder = (
            builder.master(cluster.url)
            .config("spark.driver.host", local_services.HOST)
            .config("spark.driver.bindAddress", local_services.HOST)
            .config("spark.executor.memory", "768m")
        )
    else:
        builder = builder.master(f"local[{cores}]")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    stack.append(session.stop)
    return session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epsilon", default="2")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--modes", default="local", help="comma list of local,standalone,connect")
    parser.add_argument(
        "--partition-sizes", default="5000,20000", help="comma list of records per partition"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny run: 400 records on a small graph, local mode, one size",
    )
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.modes, args.partition_sizes, args.cores = 400, "local", "200", 1
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - {"local", "standalone", "connect"}
    if unknown:
        parser.error(f"unknown mode(s): {', '.join(sorted(unknown))}")
    sizes = sorted(int(s) for s in args.partition_sizes.split(","))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message="The copy keyword is deprecated")

    import pandas as pd

    from postcode_privacy import Key, perturb_frame
    from postcode_privacy import spark as pps
    from postcode_privacy.keyfile import write_key_file

    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    stack: list = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        try:
            if args.smoke:
                graph, graph_path = _small_graph(tmp)
            else:
                from postcode_privacy import default_graph
                from postcode_privacy.graph.national import default_graph_path

                graph, graph_path = default_graph(progress=False), default_graph_path()
            rng = random.Random(args.seed)
            codes = [graph.label(rng.randrange(len(graph))) for _ in range(args.rows)]
            codes = [c.lower().replace(" ", "") if i % 4 == 0 else c for i, c in enumerate(codes)]
            frame = pd.DataFrame(
                {
                    "person": [f"P{i:08d}" for i in range(args.rows)],
                    "postcode": codes,
                    "value": [str(i) for i in range(args.rows)],
                }
            )
            csv = tmp / "in.csv"
            frame.to_csv(csv, index=False)
            row_bytes = csv.stat().st_size / max(1, args.rows)
            key = Key.generate()
            write_key_file(key, tmp / "key")
            options = dict(
                key=key, epsilon=args.epsilon, id_column="person", postcode_column="postcode"
            )

            started = time.perf_counter()
            local = perturb_frame(frame, graph=graph, **options)
            frame_seconds = time.perf_counter() - started
            command = [
                sys.executable,
                "-c",
                _CLI,
                "perturb",
                str(csv),
                "-o",
                str(tmp / "out.csv"),
                "--key",
                str(tmp / "key"),
                "--epsilon",
                args.epsilon,
                "--id-column",
                "person",
                "--postcode-column",
                "postcode",
                "--graph",
                str(graph_path),
                "--quiet",
            ]
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            cli_seconds = time.perf_counter() - started
            if done.returncode != 0:
                raise SystemExit(f"CLI failed ({done.returncode}): {done.stderr[-2000:]}")
            cli = pd.read_csv(tmp / "out.csv", dtype=str)
            assert cli["postcode_dp"].tolist() == local["postcode_dp"].tolist()
            rows = [
                ("`perturb_frame` (graph in memory)", "-", frame_seconds, 1, None),
                ("CLI (start-up and graph load included)", "-", cli_seconds, 1, None),
            ]

            for mode in modes:
                started = time.perf_counter()
                spark = _session(mode, args.cores, tmp, stack)
                print(f"{mode}: session start {time.perf_counter() - started:.1f} s")
                for size in sizes:
                    spark.conf.set(
                        "spark.sql.files.maxPartitionBytes", str(max(4096, int(size * row_bytes)))
                    )
                    spark.conf.set("spark.sql.files.openCostInBytes", "0")
                    sdf = spark.read.csv(str(csv), header=True)
                    started = time.perf_counter()
                    released = pps.perturb(sdf, graph=graph_path, **options)
                    released.write.format("noop").mode("overwrite").save()
                    seconds = time.perf_counter() - started
                    peaks = (
                        spark.range(0, 4 * args.cores, 1, 2 * args.cores)
                        .mapInPandas(_peak_memory_report, "pid long, peak_mib double")
                        .toPandas()
                    )
                    rows.append(
                        (
                            f"`spark.perturb`, {mode}",
                            f"{size:,}",
                            seconds,
                            args.cores,
                            peaks["peak_mib"].max(),
                        )
                    )
                out = released.select("postcode_dp").toPandas()["postcode_dp"].tolist()
                assert out == local["postcode_dp"].tolist(), f"{mode}: output differs"
                while stack:
                    stack.pop()()
        finally:
            while stack:
                stack.pop()()

    print(
        f"\nrows: {args.rows}, epsilon: {args.epsilon}, cores: {args.cores}, load average at "
        f"the end: {os.getloadavg()[0]:.1f}; outputs identical: perturb_frame = CLI = Spark\n"
    )
    print(
        "| path | records per partition | seconds | records/s | records/s per core "
        "| peak Python worker MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name, size, seconds, cores, peak in rows:
        peak_text = "-" if peak is None else f"{peak:,.0f}"
        print(
            f"| {name} | {size} | {seconds:.1f} | {args.rows / seconds:,.0f} | "
            f"{args.rows / seconds / cores:,.0f} | {peak_text} |"
        )


if __name__ == "__main__":
    main()
