"""Rows per second of the Spark path in local mode against perturb_frame and the CLI.

Usage::

    /work/venv/bin/python benchmarks/spark_local.py --rows 20000 --epsilon 2 --cores 2

Records are ``--rows`` postcodes drawn uniformly from the national graph (one subject each, in
mixed formatting).  Three ways of releasing them under one key are timed:

* ``perturb_frame`` in this process (the national graph already loaded, and the engine's
  landmark tables built by an untimed warm-up), once with the sampling engine held to one
  process (``POSTCODE_PRIVACY_WORKERS=1``) and once with its default of every usable CPU;
* ``postcode-privacy perturb`` on a CSV of the same records, as a subprocess (wall time,
  including interpreter start and graph load);
* ``postcode_privacy.spark.perturb`` on a ``local[cores]`` session, started beforehand (startup
  reported apart).  The Spark release is run twice: the first run includes the check pass and
  each Python worker's one-off graph load; the second shows the steady state.  Its output is
  written to Spark's ``noop`` sink, so that the time is the release, not a collect; the released
  column is then collected once and compared with perturb_frame's (they must be identical).

Wall time on a shared machine depends on what else is running, so CPU seconds are reported too:
this process and its waited-for children for perturb_frame and the CLI, and for Spark the JVM
with every process below it (Python daemon and workers) plus this driver process (Linux only).

The results are printed as a Markdown table for docs/spark.md.
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


def _process_tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and its descendants (Linux /proc; exited children that were
    waited for are included through their parent's counters)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(f) for f in fields[11:15]) / tick
    tree, frontier = {root}, [root]
    while frontier:
        frontier = [p for p, parent in parents.items() if parent in frontier and p not in tree]
        tree.update(frontier)
    return sum(times.get(p, 0.0) for p in tree)


def _own_cpu() -> float:
    """CPU seconds of this process and its waited-for children (the engine's worker pool)."""
    mine = os.times()
    return mine.user + mine.system + mine.children_user + mine.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epsilon", default="2")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")

    os.environ["PYSPARK_PYTHON"] = sys.executable
    warnings.filterwarnings("ignore", category=FutureWarning)
    import pandas as pd

    from postcode_privacy import Key, default_graph, perturb_frame
    from postcode_privacy.graph.national import default_graph_path
    from postcode_privacy.keyfile import write_key_file

    started = time.perf_counter()
    graph = default_graph(progress=False)
    graph.find("SW1A 1AA")  # build the label index, as any release does
    graph_seconds = time.perf_counter() - started

    rng = random.Random(args.seed)
    codes = [graph.label(rng.randrange(len(graph))) for _ in range(args.rows)]
    codes = [c.lower().replace(" ", "") if i % 4 == 0 else c for i, c in enumerate(codes)]
    pdf = pd.DataFrame({"person": [f"P{i:08d}" for i in range(args.rows)], "postcode": codes,
                        "value": range(args.rows)})
    key = Key.generate()
    options = dict(key=key, epsilon=args.epsilon, id_column="person", postcode_column="postcode")
    results: list[tuple[str, float, float, str]] = []

    from postcode_privacy.engine.batch import WORKERS_ENV

    os.environ[WORKERS_ENV] = "1"
    # Warm-up, untimed: the engine builds its landmark tables once per graph and process.
    perturb_frame(pdf.iloc[:8000], graph=graph, **options)
    started, cpu = time.perf_counter(), _own_cpu()
    single = perturb_frame(pdf, graph=graph, **options)
    results.append(("`perturb_frame`, one process", time.perf_counter() - started,
                    _own_cpu() - cpu, f"{WORKERS_ENV}=1; graph already in memory"))
    del os.environ[WORKERS_ENV]
    started, cpu = time.perf_counter(), _own_cpu()
    local = perturb_frame(pdf, graph=graph, **options)
    results.append(("`perturb_frame`, default", time.perf_counter() - started,
                    _own_cpu() - cpu, "engine on every usable CPU; graph already in memory"))
    assert single["postcode_dp"].tolist() == local["postcode_dp"].tolist()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_key_file(key, tmp / "key")
        pdf.to_csv(tmp / "in.csv", index=False)
        executable = Path(sys.executable).with_name("postcode-privacy")
        command = [str(executable), "perturb", str(tmp / "in.csv"),
                   "-o", str(tmp / "out.csv"), "--key", str(tmp / "key"), "--epsilon",
                   args.epsilon, "--id-column", "person", "--postcode-column", "postcode",
                   "--graph", str(default_graph_path()), "--quiet"]
        started, cpu = time.perf_counter(), _own_cpu()
        done = subprocess.run(command, capture_output=True, text=True)
        cli_seconds, cli_cpu = time.perf_counter() - started, _own_cpu() - cpu
        if done.returncode != 0:
            raise SystemExit(f"CLI failed ({done.returncode}): {done.stderr[-2000:]}")
        cli_out = pd.read_csv(tmp / "out.csv", dtype=str)
        assert cli_out["postcode_dp"].tolist() == local["postcode_dp"].tolist()
    results.append(("`postcode-privacy perturb` (CLI)", cli_seconds, cli_cpu,
                    "wall time: start, graph load, CSV in and out; every usable CPU"))

    from pyspark.sql import SparkSession

    from postcode_privacy import spark as pps

    started = time.perf_counter()
    spark = (SparkSession.builder.master(f"local[{args.cores}]")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.default.parallelism", str(args.cores * 2))
             .config("spark.sql.shuffle.partitions", str(args.cores))
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sdf = spark.createDataFrame(pdf).cache()
    sdf.count()
    startup_seconds = time.perf_counter() - started

    jvm = spark.sparkContext._gateway.proc.pid
    for run in ("first run", "second run"):
        started, cpu = time.perf_counter(), _process_tree_cpu(jvm) + _own_cpu()
        released = pps.perturb(sdf, graph=None, **options)
        check_seconds = time.perf_counter() - started
        check_cpu = _process_tree_cpu(jvm) + _own_cpu() - cpu
        released.write.format("noop").mode("overwrite").save()
        total = time.perf_counter() - started
        used = _process_tree_cpu(jvm) + _own_cpu() - cpu
        results.append((f"`spark.perturb`, `local[{args.cores}]`, {run}", total, used,
                        f"check pass {check_seconds:.1f} s ({check_cpu:.1f} CPU s), release "
                        f"{total - check_seconds:.1f} s ({used - check_cpu:.1f} CPU s)"))
    spark_out = released.select("postcode_dp").toPandas()
    assert spark_out["postcode_dp"].tolist() == local["postcode_dp"].tolist()
    spark.stop()

    print(f"rows: {args.rows}, epsilon: {args.epsilon}, radius: "
          f"{local.attrs['postcode_privacy']['radius']}, cores: {os.cpu_count()}")
    print(f"national graph load in this process: {graph_seconds:.1f} s; "
          f"Spark session start and input caching: {startup_seconds:.1f} s; "
          f"load average at the end: {os.getloadavg()[0]:.1f}")
    print("outputs identical: perturb_frame = CLI = Spark\n")
    print("| path | seconds | records per second | CPU seconds | records per CPU second | notes |")
    print("|---|---:|---:|---:|---:|---|")
    for name, seconds, cpu, note in results:
        print(f"| {name} | {seconds:.1f} | {args.rows / seconds:,.0f} | {cpu:.1f} | "
              f"{args.rows / cpu:,.0f} | {note} |")


if __name__ == "__main__":
    main()
