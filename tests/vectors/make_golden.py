"""Produce golden_v1.json: fixed graphs, key, epsilons, radii, subjects -> released postcodes.

Run from the repository root:  python tests/vectors/make_golden.py
The outputs come from the library; tests/test_determinism.py confirms every one of them with
the independent implementation in tests/independent_impl.py, which follows docs/spec.md only.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from postcode_privacy import Graph, Key, Mechanism
from postcode_privacy.graph.graph import _csr_from_pairs
from postcode_privacy.version import OUTPUT_STABILITY_VERSION

HERE = Path(__file__).parent
KEY_HEX = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

PATH_CODES = [
    "LS1 1AA",
    "LS1 1AB",
    "LS1 1AD",
    "LS1 1AE",
    "LS1 1AF",
    "LS1 1AG",
    "LS1 1AH",
    "LS1 1AJ",
    "LS1 1AL",
    "LS1 1AN",
]
PATH_EDGES = [(PATH_CODES[i], PATH_CODES[i + 1]) for i in range(9)] + [("LS1 1AA", "LS1 1AE")]
PATH_PRIOR = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]

COLOC_CODES = ["AB1 0AA", "AB1 0AB", "AB1 0AD", "AB1 0AE", "AB1 0AF", "AB1 0AG"]
COLOC_LOCATION = [0, 0, 1, 2, 2, 3]  # two pairs share a centroid
COLOC_LOC_EDGES = [(0, 1), (1, 2), (2, 3)]
COLOC_PRIOR = [2, 1, 7, 1, 1, 2**40]


def graphs() -> dict[str, Graph]:
    a = np.array([e[0] for e in COLOC_LOC_EDGES])
    b = np.array([e[1] for e in COLOC_LOC_EDGES])
    indptr, indices = _csr_from_pairs(4, a, b)
    return {
        "path": Graph.from_edges(PATH_CODES, PATH_EDGES, PATH_PRIOR),
        "colocated": Graph(COLOC_CODES, np.array(COLOC_LOCATION), indptr, indices, COLOC_PRIOR),
    }


CASES = [  # (graph, epsilon, radius or None, subject ids, postcode)
    ("path", "1", None, ["1", "2", "3", "alice", "Zoë"], "LS1 1AA"),
    ("path", "0.5", 2, ["1", "2", "3", "4", "5", "6"], "LS1 1AF"),
    ("path", "0.1", 1, ["10", "11", "12", "13"], "LS1 1AN"),
    ("path", "3", 4, ["x", "y"], "LS1 1AD"),
    ("colocated", "0.7", 2, ["1", "2", "3", "4", "5", "6", "7", "8"], "AB1 0AA"),
    ("colocated", "2", None, ["1", "2"], "AB1 0AE"),
]


def produce() -> dict:
    key = Key.from_bytes(bytes.fromhex(KEY_HEX))
    gs = graphs()
    cases = []
    for name, eps, radius, ids, code in CASES:
        m = Mechanism(gs[name], eps, radius=radius)
        for sid in ids:
            cases.append(
                {
                    "graph": name,
                    "epsilon": eps,
                    "radius": m.radius,
                    "subject_id": sid,
                    "postcode": code,
                    "output": m.perturb(key, sid, code),
                }
            )
    return {
        "format": "postcode-privacy-test-vectors",
        "format_version": 1,
        "output_stability_version": OUTPUT_STABILITY_VERSION,
        "produced_by": "tests/vectors/make_golden.py (library); confirmed by tests/independent_impl.py",
        "key_hex": KEY_HEX,
        "graphs": {name: {"sha256": g.sha256} for name, g in gs.items()},
        "cases": cases,
    }


if __name__ == "__main__":
    out = HERE / f"golden_v{OUTPUT_STABILITY_VERSION}.json"
    out.write_text(json.dumps(produce(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")
