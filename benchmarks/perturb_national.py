"""Records per second through ``postcode-privacy perturb`` on the national graph (issue 5).

For each epsilon (default 0.5, 1, 2) at the default radius this script

1. writes a CSV of N records (default 100,000) whose true postcodes are distinct postcodes
   drawn at random from the national graph, with a subject identifier per record;
2. runs ``postcode-privacy perturb`` on it as a subprocess (all usable cores, the CLI's
   defaults), timing the wall clock and sampling the memory of the whole process tree (the CLI
   and its workers) every 0.1 s: the peak of the summed PSS (shared pages split fairly between
   processes) and of the summed RSS (shared pages counted once per process);
3. times the reference sampler (``Mechanism.perturb_reference``, the full-ball search) on a
   subsample in this process, and the engine on the same subsample in one process, so that
   the speed-up is measured in the same run;
4. checks that the CLI's output equals the reference on that subsample.

``--profile`` adds a cProfile of the CLI itself, run in this process with one worker on a sample
of records at epsilon 1, grouped into where the time goes.  Results are printed as a Markdown table for
docs/performance.md.  Not a test: it takes several minutes.

    /work/venv/bin/python benchmarks/perturb_national.py [--records 100000] [--profile]
        [--exploration 2000] [--epsilons 0.5,1,2]
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
from postcode_privacy.engine import FastSampler, perturb_many, perturb_nodes
from postcode_privacy.engine.batch import usable_cpus
from postcode_privacy.graph.national import default_graph
from postcode_privacy.keyfile import write_key_file
from postcode_privacy.mechanism.subject import canonical_subject_id

CLI = str(Path(sys.executable).with_name("postcode-privacy"))
REFERENCE_SAMPLE = {"0.5": 12, "1": 120, "2": 300}


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


def run_cli(args: list[str]) -> dict:
    """Run the CLI; wall time, CPU time of the tree and peak memory."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = [0, 0]

    def watch():
        while proc.poll() is None:
            pss, rss = _memory(proc.pid)
            peak[0], peak[1] = max(peak[0], pss), max(peak[1], rss)
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    watcher.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"CLI failed ({proc.returncode}): {err.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "peak_pss": peak[0], "peak_rss": peak[1]}


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


PROFILE_PARTS = [  # (label, predicate on (file, function)), first match wins
    ("shell exploration (compiled search)", lambda f, n: n == "_explore_guided"),
    ("landmark tables, built once per process", lambda f, n: "landmarks.py" in f
     or n in ("_location_distances", "pair_table")),
    ("graph load and postcode index", lambda f, n: f.endswith(("graph/graph.py", "artefact.py",
                                                               "bundled.py"))),
    ("keyed stream (HMAC-SHA256)", lambda f, n: f.endswith(("hmac.py", "stream.py"))
     or n in ("digest", "copy", "update", "new") and "hashlib" in f),
    ("exact decision (integers)", lambda f, n: f.endswith("sampler.py")
     or n in ("_decide", "_z_high", "sync", "_bounds")),
    ("other engine work (rows, picks, grouping)", lambda f, n: "/engine/" in f
     or f.endswith("compiled.py")),
    ("release checks, CSV reading and writing", lambda f, n: "/release/" in f or "pandas" in f
     or "csv" in f),
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
        code = cli_main(["perturb", str(source), "-o", str(tmp / "out.csv"), "--key",
                         str(key_path), "--epsilon", eps, "--id-column", "id",
                         "--postcode-column", "postcode", "-q"])
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
    print(f"\nProfile: `postcode-privacy perturb`, {records:,} records with distinct postcodes, "
          f"epsilon {eps}, one process (POSTCODE_PRIVACY_WORKERS=1), graph already in memory; "
          f"{elapsed:.1f} s under cProfile, load average {load_average()}\n")
    print("| part | seconds | share |\n|---|---|---|")
    for label, seconds in totals.items():
        print(f"| {label} | {seconds:.1f} | {100 * seconds / elapsed:.0f}% |")
    rest = elapsed - sum(totals.values())
    print(f"| everything else (Python glue, numpy calls, labels) | {rest:.1f} | {100 * rest / elapsed:.0f}% |")
    stats.sort_stats("tottime").print_stats(15)


def exploration(graph, epsilons: list[str], records: int) -> None:
    """How much of the graph the engine explores per record, with and without landmarks."""
    rng = random.Random(5)
    nodes = rng.sample(range(len(graph)), records)
    key = Key.generate()
    print(f"\nExploration per record ({records:,} records with distinct postcodes, one process)\n")
    print("| epsilon | R | bound on Z | mean shells | mean locations | records/s |\n|---|---|---|---|---|---|")
    for eps in epsilons:
        mechanism = Mechanism(graph, eps)
        context = mechanism.stream_context(key)
        for landmarks in (False, True):
            sampler = FastSampler(mechanism, landmarks=landmarks)
            sampler.sample_group(context, nodes[0], ["warm-up"])
            sampler.stats.update(dict.fromkeys(sampler.stats, 0))
            started = time.perf_counter()
            for i, node in enumerate(nodes):
                sampler.sample_group(context, node, [f"e{i}"])
            rate = records / (time.perf_counter() - started)
            stats = sampler.stats
            print(f"| {eps} | {mechanism.radius} | {'landmark pairs' if landmarks else 'core'} "
                  f"| {stats['shells_explored'] / records:.1f} "
                  f"| {stats['locations_explored'] / records:,.0f} | {rate:,.0f} |", flush=True)
        # The reference explores the whole ball (R shells) for every record.
        search = sampler.search
        sizes, postcodes = [], []
        for node in nodes:
            search.start(node)
            search.explore_to(mechanism.radius)
            sizes.append(search.locations_explored)
            postcodes.append(search.ball().size)
        print(f"| {eps} | {mechanism.radius} | none (full ball, as the reference) "
              f"| {mechanism.radius} | {sum(sizes) / records:,.0f} (median "
              f"{sorted(sizes)[records // 2]:,}; median postcodes {sorted(postcodes)[records // 2]:,}) "
              "| |", flush=True)


def cli_benchmark(graph, records: int, epsilons: list[str]) -> None:
    """Steps 1 to 4 of the module docstring, for each epsilon."""
    rng = random.Random(2026)
    nodes = rng.sample(range(len(graph)), records)
    ids = [f"id{rng.randrange(10**12):012d}" for _ in nodes]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        key_path = tmp / "bench.key"
        key = Key.generate()
        write_key_file(key, key_path)
        source = tmp / "records.csv"
        with open(source, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["id", "postcode"])
            writer.writerows(zip(ids, (graph.label(v) for v in nodes)))
        for eps in epsilons:
            mechanism = Mechanism(graph, eps)
            output = tmp / f"released-{eps}.csv"
            measured = run_cli([CLI, "perturb", str(source), "-o", str(output), "--key",
                                str(key_path), "--epsilon", eps, "--id-column", "id",
                                "--postcode-column", "postcode", "-q", "--force"])
            k = REFERENCE_SAMPLE.get(eps, 50)
            sample_ids, sample_codes = ids[:k], [graph.label(v) for v in nodes[:k]]
            started = time.perf_counter()
            reference = mechanism.perturb_reference(key, sample_ids, sample_codes)
            ref_rate = k / (time.perf_counter() - started)
            canonical = [canonical_subject_id(s) for s in sample_ids]
            perturb_nodes(mechanism, key, canonical[:1], nodes[:1], workers=1, landmarks=True)  # warm
            started = time.perf_counter()
            engine = perturb_many(mechanism, key, sample_ids, sample_codes, workers=1, landmarks=True)
            engine_rate = k / (time.perf_counter() - started)
            with open(output, newline="") as handle:
                released = [row["postcode_dp"] for _, row in zip(range(k), csv.DictReader(handle))]
            if not (released == reference == engine):
                raise SystemExit(f"outputs differ from the reference at epsilon {eps}")
            rate = records / measured["wall"]
            rows.append((eps, mechanism.radius, rate, records / measured["cpu"],
                         measured["peak_pss"] / 2**30, measured["peak_rss"] / 2**30,
                         measured["wall"], ref_rate, engine_rate, k))
            print(f"epsilon {eps}: R={mechanism.radius}, {rate:,.0f} records/s "
                  f"({measured['wall']:.1f} s wall, {measured['cpu']:.1f} s CPU), peak PSS "
                  f"{measured['peak_pss'] / 2**30:.2f} GiB; reference {ref_rate:.1f}/s, engine "
                  f"in one process {engine_rate:.0f}/s on {k} records; load {load_average()}",
                  flush=True)
    print("\n| epsilon | R | records/s (CLI, wall) | records per CPU-second | peak PSS (tree) "
          "| peak RSS (tree) | wall | reference sampler | engine, 1 process | speed-up (1 process) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for eps, radius, rate, cpu_rate, pss, rss, wall, ref, eng, k in rows:
        print(f"| {eps} | {radius} | {rate:,.0f} | {cpu_rate:,.0f} | {pss:.2f} GiB | {rss:.2f} GiB "
              f"| {wall:.0f} s | {ref:.1f}/s ({k} records) | {eng:,.0f}/s | {eng / ref:,.0f}x |")
    print(f"\nload average at end: {load_average()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--smoke", action="store_true",
                        help="a few seconds on a tiny input (200 records at epsilon 2), so the "
                             "script cannot rot; the figures mean nothing")
    parser.add_argument("--epsilons", default="0.5,1,2")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-records", type=int, default=20_000)
    parser.add_argument("--exploration", type=int, default=0, metavar="N",
                        help="also report shells and locations explored on N records per epsilon")
    args = parser.parse_args()

    graph = default_graph(progress=False)
    print(f"graph: {len(graph):,} postcodes, {graph.n_locations:,} locations, "
          f"sha256 {graph.sha256[:16]}; {usable_cpus()} usable CPUs; load average "
          f"{load_average()} at start")
    if args.smoke:
        args.records, args.epsilons, args.exploration, args.profile = 200, "2", 0, False
        REFERENCE_SAMPLE["2"] = 3
    if args.records > 0:
        cli_benchmark(graph, args.records, args.epsilons.split(","))
    if args.exploration:
        exploration(graph, args.epsilons.split(","), args.exploration)
    if args.profile:
        profile_cli(graph, args.profile_records, "1")


if __name__ == "__main__":
    main()
