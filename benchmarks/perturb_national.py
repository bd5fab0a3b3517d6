"""Issue 11's table on the national graph: records per second through ``postcode-privacy perturb``.

Each row of the table (``--rows``; see ``ROWS``) is one workload at the default radius:

1. a CSV (id, postcode) is written: distinct random postcodes, rows over a fixed set of
   distinct postcodes, or rows whose postcodes are drawn from the whole graph;
2. ``postcode-privacy perturb`` runs on it as a subprocess (all usable cores, the CLI's
   defaults), timing the wall clock and CPU time; then, by default, the same release runs
   again while the summed PSS of its process tree (the CLI and its workers) is sampled every
   0.1 s, and the two outputs must be the same bytes (``--memory``: sampling slows the run
   it watches, so it is not the timed run);
3. the first few outputs are checked against the reference sampler
   (``Mechanism.perturb_reference``);
4. for repeated postcodes, the same release runs in this process through ``perturb_frame``, so
   the CLI's rate can be compared with it.

The load average before and after each run is printed with it: on a shared machine compare
records per CPU-second, or proportions, not wall-clock rates.  ``--exploration N`` adds the
shells and locations explored per record; ``--profile`` a cProfile of the CLI in one process.
``--smoke`` runs two tiny rows in seconds.  Not a test: the full table takes tens of minutes.

    /work/main/.venv/bin/python benchmarks/perturb_national.py --rows all
    /work/main/.venv/bin/python benchmarks/perturb_national.py --rows repeated-1,distinct-1
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import os
import pstats
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from postcode_privacy import Key, Mechanism
from postcode_privacy.engine import FastSampler
from postcode_privacy.engine.batch import _places, usable_cpus
from postcode_privacy.engine.landmarks import graph_tables
from postcode_privacy.engine.profiles import BallProfiles, cached_profiles, profiles_for
from postcode_privacy.graph.national import default_graph
from postcode_privacy.keyfile import write_key_file

CLI = str(Path(sys.executable).with_name("postcode-privacy"))
REFERENCE_SAMPLE = {"0.25": 3, "0.5": 12, "1": 60, "2": 200}


def _tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as handle:
                    stack.extend(int(c) for c in handle.read().split())
        except OSError:
            pass
    return pids


def _memory(pid: int) -> tuple[int, int]:
    """(summed PSS, summed RSS) in bytes over the process tree rooted at pid."""
    pss = rss = 0
    for p in _tree(pid):
        try:
            with open(f"/proc/{p}/smaps_rollup") as handle:
                for line in handle:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                    elif line.startswith("Rss:"):
                        rss += int(line.split()[1]) * 1024
        except OSError:
            pass
    return pss, rss


def run_cli(args: list[str], sample_memory: bool, env: dict | None = None) -> dict:
    """Run the CLI; wall time and CPU time of the tree, and with ``sample_memory`` peak memory.

    Sampling reads /proc/*/smaps_rollup of every process every 0.1 s, which walks the page
    tables of the mapped graph and table: on two cores it slowed a 4 to 6 s release by 0.3 to
    1.7 s, so the timed run and the memory run are separate runs (``--memory``).
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak = [0, 0]

    def watch():
        while proc.poll() is None:
            pss, rss = _memory(proc.pid)
            peak[0], peak[1] = max(peak[0], pss), max(peak[1], rss)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    if sample_memory:
        watcher.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    if sample_memory:
        watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"CLI failed ({proc.returncode}): {err.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "peak_pss": peak[0], "peak_rss": peak[1]}


def _sha256_of(path: Path) -> str:
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def perturb_args(source: Path, output: Path, key_path: Path, eps: str) -> list[str]:
    """The CLI's arguments for one row's release (after the program name): quiet, the
    benchmark's key, the workload's id and postcode columns."""
    return [
        "perturb",
        str(source),
        "-o",
        str(output),
        "--key",
        str(key_path),
        "--epsilon",
        eps,
        "--id-column",
        "id",
        "--postcode-column",
        "postcode",
        "-q",
    ]


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


PROFILE_PARTS = [  # (label, predicate on (file, function)), first match wins
    (
        "shell exploration (compiled search)",
        lambda f, n: n in ("_explore_guided", "_explore", "_expand"),
    ),
    (
        "ball-mass profile table (rows read, C built)",
        lambda f, n: f.endswith("profiles.py") or n in ("profile_shells", "brackets_for"),
    ),
    (
        "landmark tables, built once per process",
        lambda f, n: "landmarks.py" in f or n in ("_location_distances", "pair_table"),
    ),
    (
        "graph load and postcode index",
        lambda f, n: f.endswith(("graph/graph.py", "artefact.py", "bundled.py")),
    ),
    (
        "keyed stream (HMAC-SHA256)",
        lambda f, n: (
            f.endswith(("hmac.py", "stream.py"))
            or n in ("digest", "copy", "update", "new")
            and "hashlib" in f
        ),
    ),
    (
        "exact decision (integers)",
        lambda f, n: f.endswith("sampler.py") or n in ("decide", "_z_high", "sync", "z_bounds"),
    ),
    (
        "other engine work (rows, picks, grouping)",
        lambda f, n: "/engine/" in f or f.endswith("compiled.py"),
    ),
    (
        "release checks, CSV reading and writing",
        lambda f, n: "/release/" in f or "pandas" in f or "csv" in f,
    ),
]


def profile_cli(graph, records: int, eps: str) -> None:
    """Run the CLI in this process, in one worker, under cProfile; group the time by part."""
    import postcode_privacy.engine.landmarks as engine_landmarks
    from postcode_privacy.cli import main as cli_main

    engine_landmarks._TABLES.clear()  # count the landmark build, as a CLI run pays it
    rng = random.Random(99)
    nodes = rng.sample(range(len(graph)), records)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        key_path = tmp / "profile.key"
        write_key_file(Key.generate(), key_path)
        source = tmp / "records.csv"
        with open(source, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["id", "postcode"])
            writer.writerows((f"p{i}", graph.label(v)) for i, v in enumerate(nodes))
        os.environ["POSTCODE_PRIVACY_WORKERS"] = "1"
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        code = cli_main(perturb_args(source, tmp / "out.csv", key_path, eps))
        profiler.disable()
        elapsed = time.perf_counter() - started
        del os.environ["POSTCODE_PRIVACY_WORKERS"]
    if code != 0:
        raise SystemExit("profiled CLI run failed")
    stats = pstats.Stats(profiler)
    totals = {label: 0.0 for label, _ in PROFILE_PARTS}
    for (filename, _, name), (_, _, tottime, _, _) in stats.stats.items():
        for label, match in PROFILE_PARTS:
            if match(filename, name):
                totals[label] += tottime
                break
    print(
        f"\nProfile: `postcode-privacy perturb`, {records:,} records with distinct postcodes, "
        f"epsilon {eps}, one process (POSTCODE_PRIVACY_WORKERS=1), graph already in memory; "
        f"{elapsed:.1f} s under cProfile, load average {load_average()}\n"
    )
    print("| part | seconds | share |\n|---|---|---|")
    for label, seconds in totals.items():
        print(f"| {label} | {seconds:.1f} | {100 * seconds / elapsed:.0f}% |")
    rest = elapsed - sum(totals.values())
    print(
        f"| everything else (Python glue, numpy calls, labels) | {rest:.1f} | {100 * rest / elapsed:.0f}% |"
    )
    stats.sort_stats("tottime").print_stats(15)


def _bound_name(landmarks: bool, profiles, floor: bool) -> str:
    parts = []
    if profiles is not None:
        parts.append(f"profile table ({profiles.depth} hops)")
        if profiles.far is not None:
            parts.append("far-mass rows")
        if floor:
            parts.append("floor")
    if landmarks:
        parts.append("landmark pairs")
    return " + ".join(parts) or "core"


def exploration(graph, epsilons: list[str], records: int) -> None:
    """How much of the graph the engine explores per record, with and without landmarks."""
    rng = random.Random(5)
    nodes = rng.sample(range(len(graph)), records)
    key = Key.generate()
    print(f"\nExploration per record ({records:,} records with distinct postcodes, one process)\n")
    print(
        "| epsilon | R | bound on Z | mean shells | mean locations | records/s |\n|---|---|---|---|---|---|"
    )
    for eps in epsilons:
        mechanism = Mechanism(graph, eps)
        context = mechanism.stream_context(key)
        table = cached_profiles(graph)
        variants: list = [(False, None, False), (True, None, False)]
        if table is not None:  # the table with landmarks, then with its far-mass rows and floor
            alone = BallProfiles(table.cumulative, graph)
            variants += [(True, alone, False)]
            if table.far is not None:
                variants += [(False, table, False), (False, table, True), (True, table, True)]
        for landmarks, profiles, floor in variants:
            sampler = FastSampler(mechanism, landmarks=landmarks, profiles=profiles, floor=floor)
            sampler.sample_group(context, nodes[0], ["warm-up"])
            sampler.stats.update(dict.fromkeys(sampler.stats, 0))
            started = time.perf_counter()
            for i, node in enumerate(nodes):
                sampler.sample_group(context, node, [f"e{i}"])
            rate = records / (time.perf_counter() - started)
            stats = sampler.stats
            print(
                f"| {eps} | {mechanism.radius} | {_bound_name(landmarks, profiles, floor)} "
                f"| {stats['shells_explored'] / records:.1f} "
                f"| {stats['locations_explored'] / records:,.0f} | {rate:,.0f} |",
                flush=True,
            )
        # The reference explores the whole ball (R shells) for every record.
        search = sampler.search
        sizes, postcodes = [], []
        for node in nodes:
            search.start(node)
            search.explore_to(mechanism.radius)
            sizes.append(search.locations_explored)
            postcodes.append(search.ball().size)
        print(
            f"| {eps} | {mechanism.radius} | none (full ball, as the reference) "
            f"| {mechanism.radius} | {sum(sizes) / records:,.0f} (median "
            f"{sorted(sizes)[records // 2]:,}; median postcodes {sorted(postcodes)[records // 2]:,}) "
            "| |",
            flush=True,
        )


# The rows of issue 11's table: name -> (workload, epsilon, records, distinct postcodes or None
# for "all distinct").  "national" draws every record's postcode uniformly from the whole graph.
# "regional" (not a row of the issue's table) draws them from one stretch of the map with as
# many records a postcode as the national row has over the whole graph, so that a sample of a
# few million rows is as dense as the national file: nearly every postcode of the stretch
# present, which is where the shared sweeps work (a --records sample of the national row is
# not: a third of its postcodes are absent).
ROWS = {
    "distinct-1": ("100,000 distinct random postcodes", "1", 100_000, None),
    "distinct-0.5": ("100,000 distinct random postcodes", "0.5", 100_000, None),
    "distinct-0.25": ("100,000 distinct random postcodes", "0.25", 100_000, None),
    "distinct-2": ("100,000 distinct random postcodes", "2", 100_000, None),
    "repeated-1": ("1,000,000 rows over 1,000 distinct postcodes", "1", 1_000_000, 1_000),
    "national-0.5": ("10,000,000 rows drawn from the whole graph", "0.5", 10_000_000, "graph"),
    "regional-0.5": (
        "2,000,000 rows drawn from a stretch of the map, as dense as the national file",
        "0.5",
        2_000_000,
        "stretch",
    ),
}
SMOKE_ROWS = {
    "distinct-2": ("200 distinct random postcodes (smoke)", "2", 200, None),
    "repeated-1": ("3,000 rows over 30 distinct postcodes (smoke)", "1", 3_000, 30),
}


def write_workload(graph, path: Path, records: int, distinct, seed: int) -> tuple[list, list]:
    """Write the CSV (id, postcode) of one row of the table; return the first 300 (ids, nodes)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    if distinct is None:
        nodes = rng.choice(len(graph), size=records, replace=False)
    elif distinct == "graph":
        nodes = rng.integers(0, len(graph), size=records)
    elif distinct == "stretch":  # consecutive postcodes along the map, where a batch sorts them
        along = np.argsort(_places(graph_tables(graph)), kind="stable")
        national = ROWS["national-0.5"][2]  # records over the whole graph
        span = min(len(graph), round(records * len(graph) / national))
        first = int(rng.integers(0, len(graph) - span + 1))
        nodes = along[first : first + span][rng.integers(0, span, size=records)]
    else:
        pool = rng.choice(len(graph), size=distinct, replace=False)
        nodes = pool[rng.integers(0, distinct, size=records)]
    labels = np.array(graph.postcodes, dtype=object)
    ids = np.char.add("id", np.arange(records).astype(str)).astype(object)
    pd.DataFrame({"id": ids, "postcode": labels[nodes]}).to_csv(path, index=False)
    return ids[:300].tolist(), nodes[:300].tolist()


def run_row(
    graph,
    name: str,
    spec: tuple,
    tmp: Path,
    key: Key,
    key_path: Path,
    memory: str = "separate",
    repeat: int = 1,
    against: str | None = None,
) -> dict:
    """One row: the CLI (wall and CPU of the median of ``repeat`` runs, peak PSS), a check
    against the reference on a few records, and for repeated postcodes the same release in
    process through perturb_frame, run after each CLI run (the median of its ``repeat`` runs,
    and the median of the ``repeat`` ratios of each in-process run to the CLI run before it:
    on a machine whose speed drifts, only runs side by side compare).  With ``against`` (the
    ``src`` directory of another checkout), that code's CLI is timed too, run for run in
    alternating order, and must write the same bytes."""
    import pandas as pd

    from postcode_privacy import perturb_frame

    workload, eps, records, distinct = spec
    source = tmp / f"{name}.csv"
    ids, nodes = write_workload(graph, source, records, distinct, seed=len(name) * 7919)
    output = tmp / f"{name}-released.csv"
    argv = [CLI, *perturb_args(source, output, key_path, eps), "--force"]
    other_env = None
    if against is not None:
        other_env = dict(os.environ, PYTHONPATH=os.pathsep.join((against, sys.path[0])))

    def release(env: dict | None = None, sample_memory: bool = False) -> dict:
        run = run_cli(argv, sample_memory=sample_memory, env=env)
        run["sha256"] = _sha256_of(output)
        return run

    frame = None  # the same release in process, for repeated postcodes
    if distinct != "graph" and (distinct is not None or float(eps) >= 1):
        frame = pd.read_csv(source, dtype=str, keep_default_na=False)
    in_process: list[float] = []  # its rates, each run right after a run of the CLI

    def release_in_process() -> None:
        started = time.perf_counter()
        result = perturb_frame(
            frame, key=key, epsilon=eps, id_column="id", postcode_column="postcode", graph=graph
        )
        in_process.append(records / (time.perf_counter() - started))
        if result["postcode_dp"].tolist()[:k] != reference:
            raise SystemExit(f"{name}: perturb_frame differs from the reference sampler")

    k = REFERENCE_SAMPLE.get(eps, 5)
    reference = Mechanism(graph, eps).perturb_reference(
        key, ids[:k], [graph.label(v) for v in nodes[:k]]
    )
    load_before = load_average()
    runs, others = [], []  # the timed runs of this code, and of the --against code
    for i in range(repeat):
        if other_env is not None and i % 2:  # the other code first every second time
            others.append(release(other_env))
        runs.append(release(sample_memory=memory == "during"))
        if frame is not None:
            release_in_process()
        if other_env is not None and not i % 2:
            others.append(release(other_env))
    load_after = load_average()
    if memory == "separate":  # the same release again, sampled for its peak memory
        again = release(sample_memory=True)
        runs[0]["peak_pss"] = again["peak_pss"]
        runs.append(again)
    if len({run["sha256"] for run in runs + others}) != 1:
        raise SystemExit(f"{name}: runs of the same release wrote different bytes")
    ratios = sorted(rate * run["wall"] / records for rate, run in zip(in_process, runs))
    timed = sorted(runs[:repeat], key=lambda run: run["wall"])
    measured = dict(timed[(repeat - 1) // 2], peak_pss=max(run["peak_pss"] for run in runs))
    row = {
        "name": name,
        "workload": workload,
        "eps": eps,
        "records": records,
        "rate": records / measured["wall"],
        "rates": [records / run["wall"] for run in timed],
        "cpu_rate": records / measured["cpu"],
        "wall": measured["wall"],
        "pss": measured["peak_pss"] / 2**30 if memory != "none" else None,
        "load": f"{load_before} → {load_after}",
        "in_process": sorted(in_process)[(repeat - 1) // 2] if in_process else None,
        "ratio": ratios[(repeat - 1) // 2] if ratios else None,
        "against": None,
    }
    if others:
        walls = sorted(run["wall"] for run in others)
        row["against"] = records / walls[(repeat - 1) // 2]
        row["against_rates"] = [records / wall for wall in walls]
    with open(output, newline="") as handle:
        released = [r["postcode_dp"] for _, r in zip(range(k), csv.DictReader(handle))]
    if released != reference:
        raise SystemExit(f"{name}: the CLI's outputs differ from the reference sampler")
    output.unlink()
    source.unlink()
    return row


def table_benchmark(
    graph, rows: dict, memory: str = "separate", repeat: int = 1, against: str | None = None
) -> None:
    """Every chosen row of the issue's table, then one clean Markdown table."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        key_path = tmp / "bench.key"
        key = Key.generate()
        write_key_file(key, key_path)
        startup = run_row(
            graph, "start-up", ("100 records", "2", 100, None), tmp, key, key_path, memory="none"
        )
        print(
            f"fixed cost of one CLI run (start, imports, graph load and checks, 100 records): "
            f"{startup['wall']:.1f} s wall",
            flush=True,
        )
        for name, spec in rows.items():
            row = run_row(graph, name, spec, tmp, key, key_path, memory, repeat, against)
            results.append(row)
            print(
                f"{name}: {row['rate']:,.0f} records/s through the CLI ({row['wall']:.1f} s; "
                f"runs: {', '.join(f'{r:,.0f}' for r in row['rates'])}), load {row['load']}",
                flush=True,
            )
            if row["against"]:
                print(
                    f"{name}, the --against code: {row['against']:,.0f} records/s (runs: "
                    f"{', '.join(f'{r:,.0f}' for r in row['against_rates'])})",
                    flush=True,
                )
    compared = any(r["against"] for r in results)
    print(
        "\n| workload (CLI, CSV in and out, default radius) | ε | records/s (CLI, wall) "
        "| records per CPU-second | in process (perturb_frame) | in process ÷ CLI | wall "
        "| peak PSS | load average (before → after) |"
        + (" records/s, the --against code (CLI, wall, runs alternating) |" if compared else "")
    )
    print("|---|---|---|---|---|---|---|---|---|" + ("---|" if compared else ""))
    for r in results:
        inproc = f"{r['in_process']:,.0f}/s" if r["in_process"] else ""
        ratio = f"{r['ratio']:.2f}×" if r["ratio"] else ""
        pss = "" if r["pss"] is None else f"{r['pss']:.2f} GiB"
        print(
            f"| {r['workload']} | {r['eps']} | {r['rate']:,.0f} | {r['cpu_rate']:,.0f} "
            f"| {inproc} | {ratio} | {r['wall']:.0f} s | {pss} | {r['load']} |"
            + (f" {r['against']:,.0f} |" if r["against"] else (" |" if compared else ""))
        )
    print(f"\n{usable_cpus()} usable CPUs; load average at end: {load_average()}")


def ensure_profiles(graph) -> None:
    """The CLI rows measure releases with the profile table in the cache, as every release after
    the first one on this machine has it; a first build is timed and reported here instead
    (benchmarks/profiles_build.py measures it properly)."""
    if cached_profiles(graph) is not None:
        print("ball-mass profile table: in the cache")
        return
    started = time.perf_counter()
    profiles_for(graph, graph_tables(graph).loc_mass, workers=usable_cpus())
    print(f"ball-mass profile table: built now, {time.perf_counter() - started:.0f} s (one-off)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows",
        default="distinct-1,distinct-0.5,distinct-2,repeated-1",
        help="comma-separated rows of issue 11's table: " + ", ".join(ROWS) + ", or 'all'",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a few seconds on tiny inputs (200 distinct records at epsilon 2, "
        "3,000 repeated at epsilon 1), so the script cannot rot; the "
        "figures mean nothing",
    )
    parser.add_argument(
        "--records",
        type=int,
        default=0,
        metavar="N",
        help="run the chosen rows on N records instead of the table's count (to sample a slow "
        "row); the table says so",
    )
    parser.add_argument(
        "--memory",
        choices=("separate", "during", "none"),
        default="separate",
        help="peak memory from a second run of each release (separate, the default: sampling "
        "slows the run it watches), from the timed run itself (during: one run, for the "
        "national row; its time is then a little slower), or not at all (none)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="time each release N times and report the median run (the rates of all N are "
        "printed with it): on a shared two-core machine one run can be a quarter off",
    )
    parser.add_argument(
        "--against",
        metavar="SRC",
        help="also time the CLI of another checkout (its src directory, put first on "
        "PYTHONPATH), run for run in alternating order with this one: on a machine whose "
        "speed drifts, only runs interleaved like this compare two versions",
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-records", type=int, default=20_000)
    parser.add_argument(
        "--exploration",
        type=int,
        default=0,
        metavar="N",
        help="also report shells and locations explored on N records per epsilon",
    )
    parser.add_argument("--epsilons", default="0.5,1,2", help="epsilons of --exploration")
    args = parser.parse_args()

    graph = default_graph(progress=False)
    print(
        f"graph: {len(graph):,} postcodes, {graph.n_locations:,} locations, "
        f"sha256 {graph.sha256[:16]}; {usable_cpus()} usable CPUs; load average "
        f"{load_average()} at start"
    )
    if args.smoke:
        REFERENCE_SAMPLE.update({"2": 3, "1": 3})
        table_benchmark(graph, SMOKE_ROWS)
        return
    names = list(ROWS) if args.rows == "all" else [n for n in args.rows.split(",") if n]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        parser.error("unknown rows: " + ", ".join(unknown) + "; choose from " + ", ".join(ROWS))
    rows = {n: ROWS[n] for n in names}
    if args.records:
        rows = {
            n: (f"{w} — sampled: {args.records:,} records", e, args.records, d)
            for n, (w, e, _, d) in rows.items()
        }
    ensure_profiles(graph)
    against = str(Path(args.against).resolve()) if args.against else None
    table_benchmark(graph, rows, args.memory, args.repeat, against)
    if args.exploration:
        exploration(graph, args.epsilons.split(","), args.exploration)
    if args.profile:
        profile_cli(graph, args.profile_records, "1")


if __name__ == "__main__":
    main()
