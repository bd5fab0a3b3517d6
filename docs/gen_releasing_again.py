"""Regenerate the transcripts in docs/releasing-again.md by running the real commands.

    POSTCODE_PRIVACY_CACHE=... python docs/gen_releasing_again.py > /tmp/transcript.md

or only write the page's inputs (the two graphs, q1.csv to q4.csv and q4-retired.csv) into a directory, to run
the page's commands there by hand:

    python docs/gen_releasing_again.py --inputs cohort

The graphs are real: the postcodes of the Leeds districts LS6 (quarters 1 and 2) and LS6 plus
LS4 (the rebuild for quarters 3 and 4), with their centroids, taken from the embedded national
graph and built with ``build_graph``.  The cohort is made up.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

EXE = [
    sys.executable,
    "-c",
    "import sys; from postcode_privacy.cli import main; sys.exit(main(sys.argv[1:]))",
]


def district_graph(national, prefixes):
    from postcode_privacy.graph.build import build_graph

    nodes = [i for i, pc in enumerate(national.postcodes) if pc.startswith(prefixes)]
    coords = national.location_coordinates[national.node_location[nodes]]
    return build_graph([national.label(i) for i in nodes], coords[:, 0], coords[:, 1])


def run(workdir: Path, line: str) -> str:
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = dict(os.environ, PYTHONPATH=src, COLUMNS="100")
    result = subprocess.run(
        EXE + shlex.split(line)[1:], cwd=workdir, capture_output=True, text=True, env=env
    )
    return f"$ {line}\n{result.stdout}{result.stderr}" + (
        f"(exit code {result.returncode})\n" if result.returncode else ""
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", metavar="DIR", help="only write the inputs into DIR")
    args = parser.parse_args()
    if args.inputs is not None:
        work = Path(args.inputs)
        work.mkdir(parents=True, exist_ok=True)
        write_inputs(work)
        print(
            f"wrote ls6.ppgraph, ls4-ls6.ppgraph, q1.csv to q4.csv and q4-retired.csv into {work}"
        )
        return
    work = Path(tempfile.mkdtemp(prefix="releasing-again-"))
    write_inputs(work)
    print_transcripts(work)


def write_inputs(work: Path) -> None:
    """The page's two district graphs and its four quarterly extracts, into ``work``."""
    from postcode_privacy import default_graph

    national = default_graph(progress=False)
    district_graph(national, ("LS6 ",)).save(work / "ls6.ppgraph")
    district_graph(national, ("LS6 ", "LS4 ")).save(work / "ls4-ls6.ppgraph")
    ls6 = [pc for pc in national.postcodes if pc.startswith("LS6 ")]
    home = {f"S{i:03d}": ls6[(37 * i) % len(ls6)] for i in range(1, 13)}
    quarters = {"q1": dict(home)}
    quarters["q2"] = dict(home, S004=ls6[5], S009=ls6[11])  # two people move
    quarters["q3"] = dict(quarters["q2"])  # nobody moves; the graph is rebuilt
    quarters["q4"] = dict(
        quarters["q3"], S002=ls6[29], S004=ls6[17], S013=ls6[23]
    )  # moves; a recruit
    # S004 would go over the budget: the study's protocol retires a participant it refuses.
    quarters["q4-retired"] = {k: v for k, v in quarters["q4"].items() if k != "S004"}
    for name, people in quarters.items():
        pd.DataFrame(
            {
                "study_id": list(people),
                "postcode": list(people.values()),
                "visits": [len(p) % 5 for p in people],
            }
        ).to_csv(work / f"{name}.csv", index=False)


def print_transcripts(work: Path) -> None:
    common = "--key study.key --epsilon 1 --id-column study_id --postcode-column postcode"
    steps = {
        "setup": [
            "postcode-privacy keygen -o study.key",
            "postcode-privacy ledger init study-ledger.db",
        ],
        "q1": [
            f"postcode-privacy ledger check q1.csv --ledger study-ledger.db {common} --graph ls6.ppgraph",
            f"postcode-privacy perturb q1.csv -o q1-release.csv {common} --graph ls6.ppgraph --ledger study-ledger.db -q",
            "postcode-privacy ledger show study-ledger.db",
        ],
        "q2": [
            f"postcode-privacy perturb q2.csv -o q2-release.csv {common} --graph ls6.ppgraph --ledger study-ledger.db --dry-run",
            f"postcode-privacy perturb q2.csv -o q2-release.csv {common} --graph ls6.ppgraph --ledger study-ledger.db -q",
            "postcode-privacy ledger show study-ledger.db",
        ],
        "q3": [
            f"postcode-privacy ledger check q3.csv --ledger study-ledger.db {common} --graph ls4-ls6.ppgraph",
            f"postcode-privacy perturb q3.csv -o q3-release.csv {common} --graph ls4-ls6.ppgraph --ledger study-ledger.db -q",
            "postcode-privacy ledger show study-ledger.db",
        ],
        "q4": [
            f"postcode-privacy ledger check q4.csv --ledger study-ledger.db {common} --graph ls4-ls6.ppgraph --budget 3",
            f"postcode-privacy perturb q4.csv -o q4-release.csv {common} --graph ls4-ls6.ppgraph --ledger study-ledger.db --budget 3",
            f"postcode-privacy perturb q4.csv -o q4-release.csv {common} --graph ls4-ls6.ppgraph --ledger study-ledger.db --budget 3 --on-error null",
            f"postcode-privacy perturb q4-retired.csv -o q4-release.csv {common} --graph ls4-ls6.ppgraph --ledger study-ledger.db --budget 3 -q",
            "postcode-privacy ledger show study-ledger.db",
        ],
    }
    for name, lines in steps.items():
        print(f"<!-- {name} -->\n```text")
        for line in lines:
            print(run(work, line), end="")
        print("```\n")


if __name__ == "__main__":
    main()
