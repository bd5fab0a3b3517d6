"""The release checks, vectorised by distinct value, equal the rules applied row by row.

``ReleasePlan.check_records`` classifies each distinct postcode cell once and canonicalises
identifier columns in bulk (docs/performance.md, "The release around the engine").  Here it is
compared with a row-by-row oracle written from docs/release.md's rules, on columns mixing every
kind of cell, and on the common all-text and all-integer columns.
"""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
from test_release import grid_graph

from postcode_privacy import Key
from postcode_privacy.mechanism.subject import canonical_subject_id
from postcode_privacy.postcodes import try_normalise
from postcode_privacy.release import ReleasePlan
from postcode_privacy.release.records import MAX_LISTED_ERRORS, _canonical_identifiers


def oracle(plan: ReleasePlan, df: pd.DataFrame):
    """(ids, nodes, kinds) row by row: identifier first, then the postcode."""
    ids, nodes, kinds = [], [], []
    for value, pc in zip(df["id"].tolist(), df["postcode"].tolist()):
        missing = value is None or (isinstance(value, float) and value != value)
        try:
            canonical = None if missing else canonical_subject_id(value)
            kind = "missing_identifier" if missing else None
        except ValueError:
            canonical = None
            kind = "missing_identifier" if isinstance(value, str) else "invalid_identifier"
        node = -1
        if kind is None:
            if (
                pc is None
                or (isinstance(pc, float) and pc != pc)
                or (isinstance(pc, str) and not pc.strip())
            ):
                kind = "missing_postcode"
            elif try_normalise(pc) is None:
                kind = "malformed_postcode"
            else:
                found = plan.graph.find(try_normalise(pc))
                kind, node = ("unknown_postcode", -1) if found is None else (None, found)
        ids.append(canonical if kind is None else None)
        nodes.append(node)
        kinds.append(kind)
    return ids, nodes, kinds


@pytest.fixture(scope="module")
def plan():
    graph, _, _, _ = grid_graph()
    return ReleasePlan(
        key=Key.from_bytes(bytes(range(32))),
        epsilon="1",
        id_column="id",
        postcode_column="postcode",
        graph=graph,
        on_error="null",
    )


def cells(rng: random.Random, codes: list[str]):
    ids = [
        "a",
        " a ",
        "A\u030a",
        "\u00c5",
        "",
        "   ",
        "x1",
        7,
        7.0,
        2.5,
        True,
        None,
        float("nan"),
        np.int64(9),
        "  \t",
        "007",
        -3,
        2.0**60,
    ]
    pcs = [
        codes[0],
        codes[1].lower(),
        " " + codes[2].replace(" ", "") + " ",
        "",
        "  ",
        None,
        float("nan"),
        12345,
        "NOT A POSTCODE",
        "ZZ9 9ZZ",
        "ls1 1aa",
        codes[3],
    ]
    return rng.choice(ids), rng.choice(pcs)


@pytest.mark.parametrize("seed", range(4))
def test_mixed_columns_match_the_row_by_row_rules(plan, seed):
    rng = random.Random(seed)
    codes = [plan.graph.label(i) for i in range(len(plan.graph))]
    rows = [cells(rng, codes) for _ in range(400)]
    df = pd.DataFrame(
        {
            "id": pd.Series([r[0] for r in rows], dtype=object),
            "postcode": pd.Series([r[1] for r in rows], dtype=object),
        }
    )
    ids, nodes, kinds = oracle(plan, df)
    checked = plan.check_records(df, 10)
    assert checked.ids == ids
    assert checked.nodes.tolist() == nodes
    counts = checked.check.counts
    for kind in set(kinds) - {None}:
        assert counts[kind] == kinds.count(kind)
    failing = [i for i, k in enumerate(kinds) if k is not None]
    assert counts["failed"] == len(failing)
    assert [r for r, _ in checked.check.row_errors] == [
        10 + i + 1 for i in failing[:MAX_LISTED_ERRORS]
    ]


def test_text_and_integer_columns_take_the_bulk_route_to_the_same_text():
    texts = ["a", " b", "c ", "\u212b", "A\u030a", "", " ", "42", "\u00a0z\u2003", "é"]
    canonical, failures = _canonical_identifiers(texts)
    for i, text in enumerate(texts):
        if i in failures:
            assert failures[i] == ("missing_identifier", "blank identifier")
            with pytest.raises(ValueError):
                canonical_subject_id(text)
        else:
            assert canonical[i] == canonical_subject_id(text)
    # all ASCII: the route that skips normalising (ASCII text is its own NFC form)
    ascii_texts = ["a", " b\t", "\x1c42\x1f", "x y", "007", "\x0b", "AB1 2CD"]
    canonical, failures = _canonical_identifiers(ascii_texts)
    assert failures == {5: ("missing_identifier", "blank identifier")}
    assert [c for i, c in enumerate(canonical) if i != 5] == [
        canonical_subject_id(t) for i, t in enumerate(ascii_texts) if i != 5
    ]
    numbers = [0, -1, 10**30, 42]
    assert _canonical_identifiers(numbers) == ([canonical_subject_id(v) for v in numbers], {})
    # numpy integers arrive as Python ints through Series.tolist()
    assert _canonical_identifiers(pd.Series([3, 4], dtype="int64").tolist())[0] == ["3", "4"]


@pytest.mark.parametrize("written", ["lower case", "normalised"])
def test_repeated_postcodes_are_classified_once(plan, monkeypatch, written):
    """Each distinct cell is normalised once; a cell already in normalised form (most, in
    practice) needs no normalising at all."""
    codes = [plan.graph.label(i) for i in range(5)]
    cells = [c.lower() for c in codes] if written == "lower case" else codes
    df = pd.DataFrame(
        {"id": [f"s{i}" for i in range(1000)], "postcode": [cells[i % 5] for i in range(1000)]}
    )
    calls = []
    original = plan.rules._normalised
    monkeypatch.setattr(plan.rules, "_normalised", lambda v: calls.append(v) or original(v))
    checked = plan.check_records(df, 0)
    assert len(calls) == (5 if written == "lower case" else 0)
    assert checked.nodes.tolist() == [plan.graph.find(codes[i % 5]) for i in range(1000)]


def test_a_lone_surrogate_in_a_text_column_is_refused_like_row_by_row():
    texts = ["a", "b\ud800", " c "]
    canonical, failures = _canonical_identifiers(texts)
    assert canonical == ["a", None, "c"]
    assert failures[1][0] == "invalid_identifier"
    assert "\ud800" not in failures[1][1] and "b" not in failures[1][1].split()
    with pytest.raises(ValueError):
        canonical_subject_id(texts[1])
