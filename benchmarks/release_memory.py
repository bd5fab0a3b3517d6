"""Peak memory and throughput of ``postcode-privacy perturb`` as the input grows.

The release streams its input in chunks, so peak memory should stay flat as the number of rows
grows (apart from 16 bytes per distinct subject identifier for the duplicate-subject check).
Each size runs in a fresh Python process, which reports its own peak resident set size.

Usage (from the repository root; the results are quoted in docs/release.md)::

    python benchmarks/release_memory.py                      # 100k, 1M and 3M rows
    python benchmarks/release_memory.py 20000 200000         # other sizes
    python benchmarks/release_memory.py --smoke              # 200 rows: checks the script runs

The graph is a 10 x 10 grid of postcodes (a small graph keeps the per-record sampling cost
low, so the measurement is about I/O and memory, not the sampler); identifiers are all distinct.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UNITS = "ABDEFGHJLNPQRSTUWXYZ"


def one_run(rows: int, workdir: Path) -> dict:
    from postcode_privacy.cli import main
    from postcode_privacy.graph.build import build_graph
    from postcode_privacy.keyfile import write_key_file
    from postcode_privacy.mechanism import Key

    codes = [f"LS{1 + r} {1 + c % 9}{UNITS[r]}{UNITS[c]}" for r in range(10) for c in range(10)]
    graph = build_graph(
        codes,
        [400000.0 + 100 * (i % 10) for i in range(100)],
        [430000.0 + 100 * (i // 10) for i in range(100)],
    )
    graph.save(workdir / "grid.ppgraph")
    write_key_file(Key.generate(), workdir / "bench.key")
    src = workdir / "in.csv"
    with open(src, "w", encoding="utf-8") as handle:
        handle.write("subject,postcode,payload\n")
        for i in range(rows):
            handle.write(f"{i:09d},{codes[(i * 7919) % 100]},some other column {i % 97}\n")
    start = time.perf_counter()
    code = main(
        [
            "perturb",
            str(src),
            "-o",
            str(workdir / "out.csv"),
            "--key",
            str(workdir / "bench.key"),
            "--epsilon",
            "1",
            "--id-column",
            "subject",
            "--postcode-column",
            "postcode",
            "--graph",
            str(workdir / "grid.ppgraph"),
            "--quiet",
        ]
    )
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "rows": rows,
        "exit": code,
        "seconds": round(seconds, 1),
        "rows_per_second": round(rows / seconds),
        "peak_rss_mib": round(peak_kib / 1024),
        "input_mib": round(os.path.getsize(src) / 2**20, 1),
    }


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(one_run(int(sys.argv[2]), Path(tmp))))
        return
    if sys.argv[1:] == ["--smoke"]:
        sizes = [200]
    else:
        sizes = [int(a) for a in sys.argv[1:]] or [100_000, 1_000_000, 3_000_000]
    print(f"{'rows':>10} {'input MiB':>10} {'seconds':>8} {'rows/s':>8} {'peak RSS MiB':>13}")
    for rows in sizes:
        result = subprocess.run(
            [sys.executable, __file__, "--one", str(rows)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(result.stdout.strip().splitlines()[-1])
        if r["exit"] != 0:
            raise SystemExit(f"the release of {rows} rows failed with exit code {r['exit']}")
        print(
            f"{r['rows']:>10} {r['input_mib']:>10} {r['seconds']:>8} {r['rows_per_second']:>8} "
            f"{r['peak_rss_mib']:>13}"
        )


if __name__ == "__main__":
    main()
