"""Shared pieces of the Spark tests: a small real-shaped graph, messy records, exact comparison,
and a report of what each Python worker has loaded."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pandas as pd

from postcode_privacy import Graph

EPSILON = "2"
LETTERS = "ABDEFGHJLNPQRSTUWXYZ"
# PySpark 4.3's notices about pandas 3: its version notice, and a deprecated ``copy=`` keyword it
# passes to pandas when converting Arrow batches (docs/spark.md, "pandas 3").
PANDAS3_NOTICE = "ignore:.*PySpark does not yet fully support pandas:FutureWarning"
PANDAS3_COPY = "ignore:The copy keyword is deprecated"


def source_path() -> str:
    """The executors' PYTHONPATH: the directory holding the package under test, and this one
    (the worker report below is pickled by reference to this module)."""
    import postcode_privacy

    return os.pathsep.join(
        [str(Path(postcode_privacy.__file__).parent.parent), str(Path(__file__).parent)]
    )


def small_codes() -> list[str]:
    return [
        f"LS{d} {s}{a}{b}"
        for d in range(1, 4)
        for s in range(1, 3)
        for a in LETTERS[:4]
        for b in LETTERS[:5]
    ]


def small_graph(directory: Path) -> tuple[Graph, Path]:
    """120 postcodes on a ladder-like graph with an uneven prior; saved as an artefact."""
    codes = small_codes()
    n = len(codes)
    edges = [(i, i + 1) for i in range(n - 1)] + [(i, i + 7) for i in range(n - 7)]
    graph = Graph.from_edges(codes, edges, prior=[1 + (i * 7) % 5 for i in range(n)])
    path = directory / "small.ppgraph"
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
        rows.append(
            {"sid": f"S{rng.randrange(n // 2):05d}", "pc": code, "x": i * 3, "w": rng.random()}
        )
    for i, bad in ((7, "not a postcode"), (n // 2, None), (n - 3, "ZZ9 9ZZ")):
        rows[i]["pc"] = bad
    rows[n // 3]["sid"] = "   "
    return pd.DataFrame(rows)


def records(frame: pd.DataFrame) -> list[tuple]:
    """Rows as tuples with every kind of missing value as None, for exact comparison."""
    return [
        tuple(None if (v is None or (not isinstance(v, str) and pd.isna(v))) else v for v in row)
        for row in frame.itertuples(index=False)
    ]


def assert_same_release(spark_out: pd.DataFrame, local_out: pd.DataFrame) -> None:
    assert list(spark_out.columns) == list(local_out.columns)
    assert records(spark_out) == records(local_out)


def csv_input(directory: Path, n: int, seed: int, columns: dict[str, str] | None = None):
    """A CSV of ``small_records`` (renamed by ``columns``) and the frame a CSV reader sees."""
    frame = small_records(n, seed).rename(columns=columns or {})
    path = directory / f"records-{seed}.csv"
    frame.to_csv(path, index=False)
    return path, pd.read_csv(path, dtype=str, keep_default_na=False).replace({"": None})


def ancestors() -> list[int]:
    """This process's id and its ancestors' (Linux /proc)."""
    chain, pid = [], os.getpid()
    while pid > 1:
        chain.append(pid)
        with open(f"/proc/{pid}/stat") as handle:
            pid = int(handle.read().rsplit(")", 1)[1].split()[1])
    return chain


def worker_report(spark, partitions: int, sha256: str) -> pd.DataFrame:
    """Per task of a small job: the Python worker's id, its ancestors, how often it loaded the
    graph ``sha256`` and how many tasks it has served with a graph."""

    def report(batches):
        from postcode_privacy import spark as pps

        for _ in batches:
            pass
        yield pd.DataFrame(
            {
                "pid": [os.getpid()],
                "ancestors": [" ".join(map(str, ancestors()))],
                "loads": [pps.worker_graph_loads().get(sha256, 0)],
                "tasks": [pps.worker_graph_tasks()],
            }
        )

    return (
        spark.range(0, partitions * 2, 1, partitions)
        .mapInPandas(report, "pid long, ancestors string, loads long, tasks long")
        .toPandas()
    )


def event_log_text(directory: Path, *expected: str, patience: float = 60.0) -> str:
    """Everything Spark's event log under ``directory`` holds, once it holds each of
    ``expected`` (or ``patience`` seconds have passed): Spark writes the log from a listener
    queue of its own, so an event may still be on its way when the query has returned."""
    import time

    deadline = time.monotonic() + patience
    while True:
        text = "".join(
            path.read_text(errors="replace") for path in directory.rglob("*") if path.is_file()
        )
        if all(part in text for part in expected) or time.monotonic() > deadline:
            return text
        time.sleep(0.2)
