"""What the privacy ledger adds to a release, at scale (figures quoted in docs/ledger.md).

Two measurements, on a SQLite ledger (or a PostgreSQL URL given with --ledger):

1. **recording**: the ledger's work for a release of N records (default 1,000,000): keyed
   digests and the budget screen for every record, then the pending and committed transactions.
   Measured as the time of the check pass with the ledger attached minus the same pass without
   it, plus ``prepare`` and ``commit``.  (The perturbation itself is the same with or without a
   ledger, so it is left out.)
2. **check**: ``check_release`` of a file of N records against a ledger already holding P
   draws (default 10,000,000), end to end from the CSV.

The ledger is prefilled directly through the store: ten earlier releases of N records each
(distinct epsilons, so their draws are distinct) drawn from a pool of 3N subjects, whose
subject digests are computed with the ledger's own secret so that the new file's subjects
match; their draw and pair digests are random 16-byte strings (indistinguishable from HMAC
outputs for this purpose).  The graph is a 50 x 50 grid of postcodes.

Usage::

    python benchmarks/ledger_scale.py            # N = 1,000,000, P = 10,000,000
    python benchmarks/ledger_scale.py --smoke    # tiny: N = 2,000, P = 20,000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import tempfile
import time
from pathlib import Path

UNITS = "ABDEFGHJLNPQRSTUWXYZ"


class Clock:
    """Wall and CPU time of this process (the SQLite work runs in-process, so CPU time is the
    figure to read on a busy machine)."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def lap(self) -> Lap:
        wall, cpu = time.perf_counter(), time.process_time()
        lap = Lap(wall - self.wall, cpu - self.cpu)
        self.wall, self.cpu = wall, cpu
        return lap


class Lap(tuple):
    def __new__(cls, wall, cpu):
        return super().__new__(cls, (wall, cpu))

    def __sub__(self, other):
        return Lap(self[0] - other[0], self[1] - other[1])

    def __add__(self, other):
        return Lap(self[0] + other[0], self[1] + other[1])

    def __str__(self):
        return f"{self[0]:.1f} s ({self[1]:.1f} s CPU)"


def grid_graph(side: int = 50):
    from postcode_privacy.graph.build import build_graph

    codes = [
        f"LS{1 + r} {1 + (c // 400) % 9}{UNITS[c % 20]}{UNITS[(c // 20) % 20]}"
        for r in range(side)
        for c in range(side)
    ]
    east = [400000.0 + 100 * (i % side) for i in range(side * side)]
    north = [430000.0 + 100 * (i // side) for i in range(side * side)]
    return build_graph(codes, east, north), codes


def prefill(ledger, prior_draws: int, n: int, pool: int) -> None:
    from postcode_privacy.ledger.digests import DrawParameters
    from postcode_privacy.mechanism.epsilon import parse_epsilon

    releases = max(1, prior_draws // n)
    params = DrawParameters("0" * 16, "0" * 64, "1", 1, "1")
    subject_digests = ledger.digester.digests(params, [f"s{i}" for i in range(pool)], ["X"] * pool)[
        0
    ]
    rng = random.Random(1)
    store = ledger.store
    first = store.query("SELECT COALESCE(MAX(id), 0) FROM releases")[0][0] + 1
    for r in range(releases):
        rid = first + r
        with store.write():
            store.execute(
                "INSERT INTO releases (id, uid, state, created, owner, output_path, "
                "output_sha256, epsilon, radius, graph_sha256, key_fingerprint, "
                "output_stability_version, records, new_draws) VALUES "
                "(?, ?, 'committed', '2026-01-01T00:00:00+00:00', 'bench:0', '/nonexistent', "
                "'', ?, 10, '', '', '1', ?, ?)",
                # epsilon as a release writes it: canonical text ("0.1", never "0.10")
                (rid, f"bench{rid}", parse_epsilon(f"0.{r + 1:02d}").text, n, n),
            )
            members = rng.sample(range(pool), n)
            store.bulk_insert(
                "draws",
                ("draw", "subject", "pair", "release"),
                ((os.urandom(16), subject_digests[i], os.urandom(16), rid) for i in members),
            )
        print(f"  prefilled release {r + 1}/{releases}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for the test suite")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--prior-draws", type=int, default=10_000_000)
    parser.add_argument(
        "--ledger",
        help="a postgresql:// URL of an empty database "
        "(default: a SQLite file in a temporary directory)",
    )
    args = parser.parse_args()
    n, prior = (2_000, 20_000) if args.smoke else (args.records, args.prior_draws)

    import pandas as pd

    from postcode_privacy import Key
    from postcode_privacy.ledger import Ledger, LedgerRecorder, check_release
    from postcode_privacy.release.plan import ReleasePlan
    from postcode_privacy.release.reader import TableReader

    graph, codes = grid_graph(10 if args.smoke else 50)
    key = Key.generate()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        location = args.ledger or str(tmp / "ledger.db")
        secret = str(tmp / "ledger-secret.key")
        Ledger.init(location, secret).close()
        ledger = Ledger.open(location, secret)
        pool = 3 * n
        rng = random.Random(2)
        people = [f"s{i}" for i in rng.sample(range(pool), n)]
        src = tmp / "release.csv"
        pd.DataFrame(
            {"person": people, "pc": [codes[rng.randrange(len(codes))] for _ in range(n)]}
        ).to_csv(src, index=False)

        def plan():
            return ReleasePlan(
                key=key,
                epsilon="1",
                id_column="person",
                postcode_column="pc",
                graph=graph,
                on_error="null",
            )

        def check_pass(p):
            offset = 0
            for chunk in TableReader(src, 100_000).chunks():
                p.check_records(chunk, offset)
                offset += len(chunk)

        # 1. recording, into an empty ledger
        clock = Clock()
        check_pass(plan())
        bare = clock.lap()
        p = plan()
        recorder = LedgerRecorder(ledger).attach(p)
        check_pass(p)
        screened = clock.lap()
        output = tmp / "output.csv"  # an empty file stands in for the renamed output
        output.write_bytes(b"")
        recorder.prepare(output, hashlib.sha256(b"").hexdigest())
        recorder.commit()
        stored = clock.lap()
        print(
            f"recording {n:,} records: digests and screen {screened - bare} "
            f"(check pass {bare} without the ledger, {screened} with it), "
            f"pending + commit {stored}; the ledger adds {screened - bare + stored}",
            flush=True,
        )

        # 2. check against a ledger holding `prior` more draws
        ledger.close()
        with Ledger.open(location, secret) as ledger:
            prefill(ledger, prior, n, pool)
            total = ledger.store.query("SELECT COUNT(*) FROM draws")[0][0]
            clock = Clock()
            report = check_release(
                ledger,
                src,
                key=Key.generate(),
                epsilon="0.75",
                id_column="person",
                postcode_column="pc",
                graph=graph,
            )
            elapsed = clock.lap()
        print(
            f"check of {n:,} records against {total:,} draws: {elapsed} "
            f"({report['known_subjects_drawn_again']:,} known subjects, "
            f"{report['new_subjects']:,} new)"
        )
        if location.endswith(".db"):
            size = sum(f.stat().st_size for f in tmp.glob("ledger.db*"))
            print(f"SQLite ledger size: {size / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
