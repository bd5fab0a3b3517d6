"""Keyed determinism (docs/threat-model.md, "When repeated releases count as one").

Golden vectors pin every output; an independent implementation of docs/spec.md reproduces them;
a fresh process agrees; and changing any bound input gives an independent draw.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import independent_impl
import pytest

from postcode_privacy import Graph, Key, Mechanism
from postcode_privacy.mechanism import mechanism as mechanism_module
from postcode_privacy.version import OUTPUT_STABILITY_VERSION

VECTORS = Path(__file__).parent / "vectors"
sys.path.insert(0, str(VECTORS))
import make_golden  # noqa: E402

GOLDEN = json.loads(
    (VECTORS / f"golden_v{OUTPUT_STABILITY_VERSION}.json").read_text(encoding="utf-8")
)
KEY = Key.from_bytes(bytes.fromhex(GOLDEN["key_hex"]))


def test_graph_hashes_are_pinned():
    for name, graph in make_golden.graphs().items():
        assert graph.sha256 == GOLDEN["graphs"][name]["sha256"]


def test_library_reproduces_golden_vectors():
    graphs = make_golden.graphs()
    assert len(GOLDEN["cases"]) >= 25
    for case in GOLDEN["cases"]:
        m = Mechanism(graphs[case["graph"]], case["epsilon"], radius=case["radius"])
        assert m.perturb(KEY, case["subject_id"], case["postcode"]) == case["output"], case


def _node_adjacency(graph: Graph) -> dict[str, list[str]]:
    """Explicit node graph: co-located postcodes as cliques joined to neighbouring locations."""
    return {label: graph.neighbours(label) for label in graph.postcodes}


def test_independent_implementation_confirms_vectors():
    graphs = make_golden.graphs()
    key = bytes.fromhex(GOLDEN["key_hex"])
    for case in GOLDEN["cases"]:
        g = graphs[case["graph"]]
        prior = dict(zip(g.postcodes, g.prior.tolist()))
        out = independent_impl.perturb(
            key,
            GOLDEN["output_stability_version"],
            g.sha256,
            case["epsilon"],
            case["radius"],
            g.postcodes,
            _node_adjacency(g),
            prior,
            case["subject_id"],
            case["postcode"],
        )
        assert out == case["output"], case


def test_independent_powers_match():
    from decimal import Decimal

    from postcode_privacy.mechanism.powers import powers

    for eps in ("0.01", "0.3", "1", "5"):
        for radius in (1, 7, 60):
            assert tuple(independent_impl.powers(eps, radius)) == powers(Decimal(eps), radius)


def test_fresh_process_gives_the_same_outputs():
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import make_golden;"
        "from postcode_privacy import Key, Mechanism;"
        "g = make_golden.graphs(); k = Key.from_bytes(bytes.fromhex(make_golden.KEY_HEX));"
        "m = Mechanism(g['path'], '1');"
        "print(json.dumps([m.perturb(k, s, 'LS1 1AA') for s in ['1', '2', '3', 'alice', 'Zoë']]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(VECTORS)],
        capture_output=True,
        text=True,
        check=True,
        encoding="utf-8",
    )
    expected = [
        c["output"] for c in GOLDEN["cases"] if c["graph"] == "path" and c["epsilon"] == "1"
    ]
    assert json.loads(result.stdout) == expected


def _agreement_is_independent(m1: Mechanism, key1: Key, m2: Mechanism, key2: Key, source: str):
    """Two releases of 2,000 subjects agree about as often as independent draws would."""
    n = 2000
    ids = [f"s{i}" for i in range(n)]
    a = m1.perturb_many(key1, ids, [source] * n)
    b = m2.perturb_many(key2, ids, [source] * n)
    p1 = dict(zip(m1.graph.postcodes, m1.probabilities(source)))
    p2 = dict(zip(m2.graph.postcodes, m2.probabilities(source)))
    match = float(sum(p1[y] * p2.get(y, 0) for y in p1))
    agree = sum(x == y for x, y in zip(a, b))
    sd = math.sqrt(n * match * (1 - match))
    assert abs(agree - n * match) < 6 * sd + 1, (agree, n * match)
    assert agree < n  # not the same release


GRAPH = make_golden.graphs()["path"]
BASE = Mechanism(GRAPH, "1", radius=3)


def test_same_everything_is_identical():
    ids = [str(i) for i in range(500)]
    assert BASE.perturb_many(KEY, ids, ["LS1 1AE"] * 500) == BASE.perturb_many(
        KEY, ids, ["LS1 1AE"] * 500
    )


def test_other_key_is_an_independent_draw():
    _agreement_is_independent(BASE, KEY, BASE, Key.generate(), "LS1 1AE")


def test_other_epsilon_is_an_independent_draw():
    _agreement_is_independent(BASE, KEY, Mechanism(GRAPH, "1.0000001", radius=3), KEY, "LS1 1AE")


def test_other_radius_is_an_independent_draw():
    _agreement_is_independent(BASE, KEY, Mechanism(GRAPH, "1", radius=4), KEY, "LS1 1AE")


def test_other_graph_is_an_independent_draw():
    other = Graph.from_edges(
        make_golden.PATH_CODES,
        make_golden.PATH_EDGES,
        [p + 1 if i == 9 else p for i, p in enumerate(make_golden.PATH_PRIOR)],
    )
    assert other.sha256 != GRAPH.sha256
    _agreement_is_independent(BASE, KEY, Mechanism(other, "1", radius=3), KEY, "LS1 1AE")


def test_other_stability_version_is_an_independent_draw(monkeypatch):
    ids = [f"s{i}" for i in range(2000)]
    before = BASE.perturb_many(KEY, ids, ["LS1 1AE"] * 2000)
    monkeypatch.setattr(mechanism_module, "OUTPUT_STABILITY_VERSION", "999")
    after = BASE.perturb_many(KEY, ids, ["LS1 1AE"] * 2000)
    p = BASE.probabilities("LS1 1AE")
    match = float(sum(x * x for x in p))
    agree = sum(x == y for x, y in zip(before, after))
    assert abs(agree - 2000 * match) < 6 * math.sqrt(2000 * match * (1 - match)) + 1


@pytest.mark.parametrize("a,b", [(42, "42"), (" 42 ", "42"), (42.0, "42"), ("Zoe\u0308", "Zoë")])
def test_identifier_forms_give_the_same_draw(a, b):
    assert BASE.perturb(KEY, a, "LS1 1AE") == BASE.perturb(KEY, b, "LS1 1AE")


# (unusable identifier, the reason the error must give, text of the value it must not echo)
UNUSABLE_IDENTIFIERS = [
    (2.0**53 + 42 * 2, "too large to be exact", "9007199254741076"),
    (-(2.0**53 + 4242 * 2), "too large to be exact", "9007199254749476"),
    (42.5, "non-integral", "42.5"),
    (float("inf"), "non-integral", "inf"),
    (float("nan"), "missing", "nan"),
    (True, "missing or boolean", "True"),
    (None, "missing or boolean", "None"),
    (" \t\u00a0 ", "blank", None),  # nothing but whitespace: there is no value to echo
    (b"4242", "unsupported type", "4242"),
]


@pytest.mark.parametrize("bad,reason,value_text", UNUSABLE_IDENTIFIERS)
def test_unusable_identifiers_are_refused_without_echoing_them(bad, reason, value_text):
    """Floats beyond 2^53 no longer hold every integer, so two people could share one."""
    if value_text is not None:  # the check below can only fail if the input holds the text
        assert value_text in repr(bad)
    with pytest.raises(ValueError, match=reason) as info:
        BASE.perturb(KEY, bad, "LS1 1AE")
    assert "identifier" in str(info.value)
    if value_text is not None:
        assert value_text not in str(info.value)


def test_a_built_graph_and_its_saved_file_describe_a_release_in_the_same_bytes(
    tmp_path, monkeypatch
):
    """The first release on a machine builds the national graph in its own process: its
    manifest listed the graph's params and provenance in build order, every later one (the
    graph loaded from its cached file) in sorted order, so the same release made on a fresh and
    a warm machine differed byte for byte (a review across machines, round 30)."""
    import random

    import pandas as pd

    from postcode_privacy import release_file
    from postcode_privacy.graph.artefact import load_graph, save_graph
    from postcode_privacy.graph.build import build_graph

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    rng = random.Random(1)
    codes = [f"AB{i // 10} {i % 10}AA" for i in range(10, 60)]
    built = build_graph(
        codes,
        [rng.uniform(0, 2e4) for _ in codes],
        [rng.uniform(0, 2e4) for _ in codes],
        params_extra={"source": "test", "prior": "uniform"},
        provenance={"zeta": 1, "alpha": {"b": 2, "a": 1}},
    )
    save_graph(built, tmp_path / "g.ppgraph")
    loaded = load_graph(tmp_path / "g.ppgraph")
    assert list(built.params) != list(loaded.params)  # the difference this test is about
    pd.DataFrame({"id": [str(i) for i in range(20)], "pc": codes[:20]}).to_csv(
        tmp_path / "in.csv", index=False
    )
    written = []
    for name, graph in (("built", built), ("loaded", loaded)):
        out = tmp_path / name / "out.csv"
        out.parent.mkdir()
        release_file(
            tmp_path / "in.csv", out, key=Key(bytes(range(32))), epsilon="1", id_column="id",
            postcode_column="pc", graph=graph, radius=5,
        )  # fmt: skip
        written.append((out.read_bytes(), (tmp_path / name / "out.csv.manifest.json").read_bytes()))
    assert written[0] == written[1]
