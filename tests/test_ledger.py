"""The privacy ledger (docs/ledger.md): each rule, on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from graphs import leeds_grid

from postcode_privacy import Key, write_key_file
from postcode_privacy.cli import main
from postcode_privacy.errors import InputDataError, KeyFileError
from postcode_privacy.ledger import Ledger, LedgerError, LedgerRecorder, check_release, spend_text
from postcode_privacy.ledger.digests import Digester, DrawParameters, _Hmac
from postcode_privacy.release import release_file
from postcode_privacy.release.manifest import read_audit

SRC = str(Path(__file__).resolve().parents[1] / "src")


GRAPH, CODES = leeds_grid()
KEY = Key.from_bytes(b"k" * 32)


# -- backends ---------------------------------------------------------------------------------


# The PostgreSQL runs start a server once per session: they belong to the slow tier.
@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def location(request, tmp_path):
    """A fresh ledger location (not yet created) and its secret's path."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db"), None
    server = request.getfixturevalue("postgres")
    return server.new_database(), str(tmp_path / "ledger-secret.key")


@pytest.fixture
def ledger(location):
    where, secret = location
    Ledger.init(where, secret).close()
    with Ledger.open(where, secret) as opened:
        yield opened


def write_input(path, people, codes):
    pd.DataFrame({"person": people, "pc": codes}).to_csv(path, index=False)
    return path


def release(ledger, src, out, *, budget=None, graph=GRAPH, key=KEY, **options):
    options.setdefault("epsilon", "1")
    return release_file(
        src,
        out,
        key=key,
        id_column="person",
        postcode_column="pc",
        graph=graph,
        ledger=LedgerRecorder(ledger, budget),
        **options,
    )


def check(ledger, src, *, graph=GRAPH, key=KEY, **options):
    options.setdefault("epsilon", "1")
    return check_release(
        ledger, src, key=key, id_column="person", postcode_column="pc", graph=graph, **options
    )


def screened_plan(ledger, budget=None):
    """A plan on the test graph that leaves failing records empty, screened by ``ledger``
    under ``budget``: (plan, recorder)."""
    from postcode_privacy.release import ReleasePlan

    plan = ReleasePlan(
        key=KEY, epsilon="1", id_column="person", postcode_column="pc", graph=GRAPH, on_error="null"
    )
    return plan, LedgerRecorder(ledger, budget).attach(plan)


def spends(dist):
    return {spend_text(v): n for v, n in dist}


# -- digests ----------------------------------------------------------------------------------


def test_precomputed_pads_are_hmac_sha256():
    key = bytes(range(32))
    for message in (b"", b"x", bytes(200)):
        h = _Hmac(key)
        inner = h.inner.copy()
        inner.update(message)
        outer = h.outer.copy()
        outer.update(inner.digest())
        assert outer.digest() == hmac.digest(key, message, "sha256")


def test_digests_are_domain_separated_and_cover_all_six_conditions():
    d = Digester(Key.from_bytes(b"s" * 32))
    base = ("a" * 16, "b" * 64, "1", 10, "1")
    s0, p0, d0 = (x[0] for x in d.digests(DrawParameters(*base), ["7"], ["LS1 1AA"]))
    assert len({s0, p0, d0}) == 3 and all(len(x) == 16 for x in (s0, p0, d0))
    for i, other in enumerate(("c" * 16, "e" * 64, "1.0001", 11, "2")):
        changed = list(base)
        changed[i] = other
        assert d.digests(DrawParameters(*changed), ["7"], ["LS1 1AA"])[2][0] != d0
    moved = d.digests(DrawParameters(*base), ["7"], ["LS1 1AB"])
    assert moved[0][0] == s0 and moved[1][0] != p0 and moved[2][0] != d0
    # Length prefixes keep field boundaries: ("71", "LS1...") is not ("7", "1LS1...").
    assert (
        d.digests(DrawParameters(*base), ["71"], ["S1 1AA"])[1][0]
        != d.digests(DrawParameters(*base), ["7"], ["1S1 1AA"])[1][0]
    )
    # Another secret, other digests.
    assert (
        Digester(Key.from_bytes(b"t" * 32)).digests(DrawParameters(*base), ["7"], ["LS1 1AA"])[0][0]
        != s0
    )


# -- the rules --------------------------------------------------------------------------------


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_a_sqlite_ledger_is_private_from_the_moment_it_exists(tmp_path, monkeypatch):
    """The database is created owner-only before SQLite opens it (SQLite gives its WAL and
    shared-memory files the same mode), not chmod-ed after: with a umask of 0 nothing of the
    ledger is ever readable by others, even while it is open."""
    import sqlite3

    import postcode_privacy.ledger.sqlite_store as stores

    where, at_connect = tmp_path / "ledger.db", []
    real_connect = sqlite3.connect

    def connect(path, *args, **kwargs):
        if not kwargs.get("uri"):  # a read-only probe (a URI) never creates a file
            at_connect.append(os.stat(path).st_mode & 0o777 if os.path.exists(path) else None)
        return real_connect(path, *args, **kwargs)

    monkeypatch.setattr(stores.sqlite3, "connect", connect)
    old_umask = os.umask(0)
    try:
        Ledger.init(str(where), None).close()
        # SQLite never creates the file itself: not the one being built, nor the one in place
        assert at_connect == [0o600, 0o600]
        with Ledger.open(str(where), None):
            files = sorted(tmp_path.glob("ledger.db*"))
            modes = {p.name: p.stat().st_mode & 0o777 for p in files}
    finally:
        os.umask(old_umask)
    assert "ledger.db" in modes and set(modes.values()) == {0o600}, modes
    assert any(name.endswith("-wal") for name in modes), modes  # the WAL was looked at too


@pytest.mark.parametrize(
    ("name", "secret", "message"),
    [
        ("no/such/ledger.db", None, "cannot create the ledger: its directory does not exist"),
        ("b" * 250 + ".db", None, "cannot create the ledger"),  # no room for SQLite's files
        ("short.db", "c" * 256 + ".key", "cannot create key file"),
    ],
    ids=["missing-directory", "long-name", "long-secret-name"],
)
def test_a_ledger_that_cannot_be_created_is_a_clean_error(tmp_path, capsys, name, secret, message):
    """Nothing is left behind, and the message is the CLI's, not a traceback."""
    args = ["ledger", "init", str(tmp_path / name)]
    args += ["--ledger-secret", str(tmp_path / secret)] if secret else []
    assert main(args) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_init_open_and_secret(location, tmp_path):
    where, secret = location
    Ledger.init(where, secret).close()
    secret_file = Path(secret or where + ".key")
    assert secret_file.stat().st_mode & 0o777 == 0o600
    assert secret_file.read_text().startswith("postcode-privacy key file v1")
    with pytest.raises(Exception, match="already"):
        Ledger.init(where, secret)
    other = tmp_path / "other.key"
    write_key_file(Key.generate(), other)
    with pytest.raises(KeyFileError, match="not this ledger's secret"):
        Ledger.open(where, other)


def test_an_identical_release_counts_once(ledger, tmp_path):
    src = write_input(tmp_path / "in.csv", ["1", "2", " 3", "3"], CODES[:3] + ["ls1 1ad"])
    release(ledger, src, tmp_path / "a.csv")
    first = ledger.summary()
    assert spends(first["subjects"]) == {"1": 3}
    assert first["draws"] == 3
    # Same six conditions, harmless differences in form: identifier " 3" is "3".
    src2 = write_input(tmp_path / "in2.csv", [1, 2, 3], ["LS11AA", "LS1 1ab", "LS1 1AD"])
    report = check(ledger, src2)
    assert (report["repeats"], report["new_draws"], report["new_subjects"]) == (3, 0, 0)
    release(ledger, src2, tmp_path / "b.csv")
    second = ledger.summary()
    assert second["draws"] == 3 and spends(second["subjects"]) == {"1": 3}
    assert [r["new_draws"] for r in second["releases"]] == [3, 0]


def test_a_release_in_several_chunks_is_accounted_once(ledger, tmp_path):
    """The check pass and the release pass both show every chunk to the ledger's screen; the
    release is accounted once, with the spend and the records of the input."""
    people = ["1", "2", "3", "4", "5", "1", "6"]
    src = write_input(tmp_path / "in.csv", people, CODES[:5] + [CODES[0], CODES[5]])
    release(ledger, src, tmp_path / "a.csv", budget=Fraction(5), chunk_size=2)
    summary = ledger.summary()
    assert summary["draws"] == 6 and spends(summary["subjects"]) == {"1": 6}
    assert [r["records"] for r in summary["releases"]] == [7]
    assert [r["new_draws"] for r in summary["releases"]] == [6]


@pytest.mark.parametrize(
    "change",
    ["key", "subject", "postcode", "graph", "epsilon", "radius", "output_stability_version"],
)
def test_each_condition_that_differs_is_a_new_draw(ledger, tmp_path, monkeypatch, change):
    src = write_input(tmp_path / "in.csv", ["1"], [CODES[0]])
    release(ledger, src, tmp_path / "a.csv", epsilon="0.5", radius=30)
    options = {"epsilon": "0.5", "radius": 30, "graph": GRAPH, "key": KEY}
    if change == "key":
        options["key"] = Key.from_bytes(b"q" * 32)
    elif change == "subject":
        src = write_input(tmp_path / "in2.csv", ["2"], [CODES[0]])
    elif change == "postcode":
        src = write_input(tmp_path / "in2.csv", ["1"], [CODES[1]])
    elif change == "graph":
        options["graph"] = leeds_grid(max_edge_km=0.15)[0]
        assert options["graph"].sha256 != GRAPH.sha256
    elif change == "epsilon":
        options["epsilon"] = "0.25"
    elif change == "radius":
        options["radius"] = 31
    else:
        monkeypatch.setattr("postcode_privacy.ledger.recording.OUTPUT_STABILITY_VERSION", "2")
    report = check(ledger, src, **options)
    assert report["repeats"] == 0 and report["new_draws"] == 1
    expected_spend = Fraction(1, 2) + Fraction(options["epsilon"])
    if change == "subject":
        assert report["new_subjects"] == 1 and report["spend_after_known"] == []
    else:
        assert report["known_subjects_drawn_again"] == 1
        assert report["spend_after_known"] == [(expected_spend, 1)]


def test_spend_is_exact_and_per_pair(ledger, tmp_path):
    src = write_input(tmp_path / "in.csv", ["1", "2"], [CODES[0], CODES[5]])
    for radius in (30, 31, 32):  # three draws of each, at epsilon 0.1
        release(ledger, src, tmp_path / f"r{radius}.csv", epsilon="0.1", radius=radius)
    moved = write_input(tmp_path / "moved.csv", ["1", "2"], [CODES[7], CODES[5]])
    release(ledger, moved, tmp_path / "moved-out.csv", epsilon="0.1", radius=30)
    summary = ledger.summary()
    # 0.1 + 0.1 + 0.1 is exactly 0.3 here (in floats it is 0.30000000000000004).
    assert spends(summary["subjects"]) == {"0.3": 1, "0.4": 1}
    assert spends(summary["pairs"]) == {"0.1": 1, "0.3": 2}


def test_a_budget_given_to_the_python_api_is_read_exactly_or_refused(ledger, tmp_path):
    """``LedgerRecorder(ledger, 0.3)`` decided refusals against the float nearest 0.3 (below
    it), and NaN or infinity switched the budget off and left a ledger `ledger show` called
    damaged (an audit of round 28): the API reads a budget as Mechanism reads epsilon."""
    from decimal import Decimal

    from postcode_privacy.errors import InvalidParameterError

    for given in ("0.3", Decimal("0.3"), 0.3, Fraction(3, 10)):
        assert LedgerRecorder(ledger, given).budget == Fraction(3, 10), given
    assert LedgerRecorder(ledger, 3).budget == 3 and LedgerRecorder(ledger).budget is None
    huge = (Fraction(1, 2**15000), Fraction(2**15000, 3**9000))  # (once a raw ValueError)
    for bad in (float("nan"), float("inf"), Fraction(1, 3), True, -1, 0, "abc", [1], 10**7, *huge):
        with pytest.raises(InvalidParameterError):
            LedgerRecorder(ledger, bad)
    with pytest.raises(AttributeError):
        LedgerRecorder(ledger, "1").budget = 0.3  # type: ignore[misc]  # read-only
    src = write_input(tmp_path / "in.csv", ["1"], [CODES[0]])
    for radius in (30, 31, 32):  # three new draws at epsilon 0.1: exactly 0.3, within 0.3
        release(ledger, src, tmp_path / f"r{radius}.csv", epsilon="0.1", radius=radius, budget=0.3)
    with pytest.raises(InputDataError, match="privacy budget exceeded"):
        release(ledger, src, tmp_path / "r33.csv", epsilon="0.1", radius=33, budget=0.3)
    assert spends(ledger.summary()["subjects"]) == {"0.3": 1}


def test_terminated_mapping_counts_the_mapped_postcode(ledger, tmp_path):
    table = pd.DataFrame(
        {"postcode": ["LS9 9AA"], "easting": [400230.0], "northing": [430100.0]}
    )  # 30 m from LS1 2BD
    src = write_input(tmp_path / "in.csv", ["1"], ["LS9 9AA"])
    release(ledger, src, tmp_path / "a.csv", terminated="nearest", terminated_locations=table)
    live = write_input(tmp_path / "live.csv", ["1"], ["LS1 2BD"])
    assert check(ledger, live)["repeats"] == 1


def test_check_counts_repeats_known_and_new_subjects(ledger, tmp_path):
    release(
        ledger,
        write_input(tmp_path / "q1.csv", ["1", "2", "3"], CODES[:3]),
        tmp_path / "q1-out.csv",
    )
    src = write_input(
        tmp_path / "q2.csv",
        ["1", "2", "2", "4", "4", "5", ""],
        [CODES[0], CODES[9], CODES[9], CODES[4], CODES[4], CODES[6], CODES[0]],
    )
    report = check(ledger, src)
    assert report["records"] == 7 and report["unreleasable"] == 1
    assert report["repeats"] == 1
    assert report["new_draws_of_known_subjects"] == 2 and report["known_subjects_drawn_again"] == 1
    assert report["new_subjects_records"] == 3 and report["new_subjects"] == 2
    assert report["spend_after_known"] == [(Fraction(2), 1)]
    assert ledger.summary()["draws"] == 3  # a check records nothing


def test_check_spends_epsilon_once_for_each_new_draw_of_a_subject(ledger, tmp_path):
    """A subject drawn anew at two postcodes in one release spends ε twice; the preview's
    spend after the release counted each subject's draws, but no test gave a subject more than
    one (a mutation that spent ε once survived: a review of round 36)."""
    first = write_input(tmp_path / "q1.csv", ["1", "2"], CODES[:2])
    release(ledger, first, tmp_path / "o.csv", epsilon="0.5")
    src = write_input(
        tmp_path / "q2.csv",
        ["1", "1", "1", "2", "3", "3"],
        [CODES[0], CODES[5], CODES[6], CODES[7], CODES[8], CODES[9]],
    )
    report = check(ledger, src, epsilon="0.5")
    assert report["repeats"] == 1 and report["new_draws"] == 5
    # subject 1: 1/2 before, two new draws -> 3/2; subject 2: one new draw -> 1
    assert report["spend_after_known"] == [(Fraction(1), 1), (Fraction(3, 2), 1)]
    # subject 3 is new, with two draws: 1
    assert report["spend_after_all_drawn"] == [(Fraction(1), 2), (Fraction(3, 2), 1)]


@pytest.mark.parametrize("policy", ["error", "drop", "null"])
def test_a_budget_refusal_stops_the_release_whatever_on_error_says(ledger, tmp_path, policy):
    """Only a new draw can be refused, and a subject draws anew when their postcode changed:
    an empty cell or a missing row in its place told readers that subject 1 moved (a review
    of round 28).  Such a record now stops the release under every policy; the policy still
    handles the records that fail the record checks."""
    q1 = write_input(tmp_path / "q1.csv", ["1", "2", "3"], CODES[:3])
    release(ledger, q1, tmp_path / "q1-out.csv", epsilon="1.5")
    # Subject 1 moved: a new draw at 1.5 takes it to 3 > 2.5; subject 2 repeats (free); 4 new.
    q2 = write_input(
        tmp_path / "q2.csv", ["2", "1", "4", "4"], [CODES[1], CODES[8], CODES[3], CODES[4]]
    )
    out = tmp_path / "q2-out.csv"
    with pytest.raises(InputDataError) as info:
        release(ledger, q2, out, epsilon="1.5", budget=Fraction("2.5"), on_error=policy)
    assert [row for row, _ in info.value.row_errors] == [2, 4]
    if policy != "error":
        assert "2 of 4 records would take their subjects over the budget" in str(info.value)
        assert "whatever on_error says" in str(info.value)
        # what an empty cell would tell: a refused new draw, not always a move (a new key, graph
        # or epsilon draws every subject anew; an audit of round 28)
        assert "that its subject was refused a new draw" in str(info.value)
        assert (
            "if the key, graph, epsilon and radius are those of the releases before, that they moved"
            in str(info.value)
        )
    assert not [p.name for p in tmp_path.iterdir() if "q2-out" in p.name]  # nor lock, temp
    assert ledger.summary()["draws"] == 3 and len(ledger.summary()["releases"]) == 1
    # Within the budget the policy applies to a postcode that fails the record checks.
    q3 = write_input(tmp_path / "q3.csv", ["2", "1", "4"], [CODES[1], "not one", CODES[3]])
    if policy == "error":
        with pytest.raises(InputDataError, match="malformed postcode: 1"):
            release(ledger, q3, out, epsilon="1.5", budget=Fraction("2.5"), on_error=policy)
        return
    release(ledger, q3, out, epsilon="1.5", budget=Fraction("2.5"), on_error=policy)
    counts = read_audit(out)["counts"]
    assert counts["over_budget"] == 0 and counts["malformed_postcode"] == 1
    released = pd.read_csv(out, dtype=str, keep_default_na=False)
    if policy == "drop":
        assert released["person"].tolist() == ["2", "4"]
    else:
        assert [v == "" for v in released["postcode_dp"]] == [False, True, False]
    summary = ledger.summary()
    assert summary["draws"] == 4  # only subject 4's draw is new
    assert spends(summary["subjects"]) == {"1.5": 4}


@pytest.mark.parametrize("chunk_size", [5, 1000])
def test_a_budget_refusal_is_listed_after_any_number_of_other_failures(
    ledger, tmp_path, chunk_size
):
    """The first 20 listed failures were shared by every kind, so 25 bad postcodes before a
    refused record left the budget's error naming no row at all (a review of round 28); the
    refused records are listed on their own."""
    release(ledger, write_input(tmp_path / "q1.csv", ["2"], [CODES[1]]), tmp_path / "q1-out.csv")
    people = [str(100 + i) for i in range(25)] + ["2"]
    q2 = write_input(tmp_path / "q2.csv", people, ["XX"] * 25 + [CODES[8]])  # 2 moved
    with pytest.raises(InputDataError) as info:
        release(
            ledger,
            q2,
            tmp_path / "q2-out.csv",
            budget=Fraction(1),
            on_error="null",
            chunk_size=chunk_size,
        )
    assert info.value.row_errors == [(26, "privacy budget exceeded (ledger)")]
    assert "1 of 26 records would take their subjects over the budget" in str(info.value)
    assert info.value.row_lines[26] == 27  # (line 1 is the header)


def test_a_chunk_finished_without_prepare_chunk_is_refused_too(ledger, tmp_path):
    """``checked_chunk``, ``PendingChunk.start`` and ``finish_chunk`` (public, below
    ``process_chunk``) released the refused record with an empty cell (a review of round 28)."""

    release(ledger, write_input(tmp_path / "q1.csv", ["2"], [CODES[1]]), tmp_path / "q1-out.csv")
    plan, _ = screened_plan(ledger, Fraction(1))
    chunk = pd.DataFrame({"person": ["3", "2"], "pc": [CODES[2], CODES[8]]})
    pending = plan.checked_chunk(chunk, 0)
    pending.start()
    with pytest.raises(InputDataError, match="would take their subjects over the budget"):
        plan.finish_chunk(pending)
    with pytest.raises(InputDataError, match="would take their subjects over the budget"):
        plan.process_chunk(chunk, 0)


def test_a_budget_spent_by_a_release_recorded_between_the_passes_says_so(
    ledger, tmp_path, monkeypatch
):
    """Within the budget when checked, over it in the release pass because another release
    was recorded in between: the message counted one chunk ("1 of 1 records") and blamed the
    input (a review of round 28); it says what happened, as the final re-check does."""
    from postcode_privacy.ledger.recording import LedgerRecorder as Recorder
    from postcode_privacy.release.records import OverBudgetError

    q2 = write_input(tmp_path / "q2.csv", ["1", "2", "3", "4", "6"], CODES[:4] + [CODES[9]])
    other = write_input(tmp_path / "other.csv", ["6"], [CODES[7]])
    screen, passes = Recorder.screen, []

    def screen_then_race(self, ids, nodes, row_offset):
        if row_offset == 0:
            passes.append(True)
            if len(passes) == 2:  # between the check pass and the release pass
                monkeypatch.setattr(Recorder, "screen", screen)
                release(ledger, other, tmp_path / "other-out.csv")
        return screen(self, ids, nodes, row_offset)

    monkeypatch.setattr(Recorder, "screen", screen_then_race)
    with pytest.raises(LedgerError, match="since this one was checked would take some") as info:
        release(
            ledger,
            q2,
            tmp_path / "q2-out.csv",
            budget=Fraction("1.5"),
            on_error="null",
            chunk_size=2,
        )
    assert not isinstance(info.value, OverBudgetError)
    assert not [p.name for p in tmp_path.iterdir() if "q2-out" in p.name]
    assert len(ledger.summary()["releases"]) == 1  # the other release only


def cli_ledger_release(tmp_path) -> list[str]:
    """The options of a ``perturb`` on the test graph with a new SQLite ledger in ``tmp_path``
    (ledger.db, its key, release.key and g.ppgraph written there)."""
    where = str(tmp_path / "ledger.db")
    Ledger.init(where, None).close()
    keyfile = tmp_path / "release.key"
    write_key_file(KEY, keyfile)
    graph = tmp_path / "g.ppgraph"
    GRAPH.save(graph)
    options = ["--key", str(keyfile), "--epsilon", "1", "--id-column", "person"]
    return options + ["--postcode-column", "pc", "--graph", str(graph), "--ledger", where]


def test_a_dry_run_refuses_what_the_release_would_refuse_before_its_first_record(tmp_path, capsys):
    """``perturb --dry-run`` said "all pass" and exited 0 for a release that would stop at
    once: an output over the input, one that exists, in no directory, of no known format, or
    CSV for a Parquet column or cell that has no CSV text (a hostile review of round 27).  It
    now exits as the release does, with the same message, and writes nothing."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    common = cli_ledger_release(tmp_path)
    keyfile = tmp_path / "release.key"
    src = write_input(tmp_path / "in.csv", ["1", "2"], CODES[:2])
    (tmp_path / "old.csv").write_text("x\n")
    nested = tmp_path / "nested.parquet"
    pq.write_table(pa.table({"person": ["1", "2"], "pc": CODES[:2], "l": [[1], [2]]}), nested)
    late = tmp_path / "late.parquet"
    stamp = pa.array([dt.datetime(2000, 1, 1), dt.datetime(9999, 12, 31, 23, 59)])
    stamp = stamp.cast(pa.timestamp("us", tz="Asia/Tokyo"))
    pq.write_table(pa.table({"person": ["1", "2"], "pc": CODES[:2], "t": stamp}), late)
    cases = [
        (src, src),
        (src, tmp_path / "old.csv"),
        (src, tmp_path / "missing" / "out.csv"),
        (src, tmp_path / "out.txt"),
        (src, keyfile),
        (nested, tmp_path / "out.csv"),
        (late, tmp_path / "out.csv"),
    ]
    (tmp_path / ".squatted.csv.lock").mkdir()
    (tmp_path / ".full.csv.lock").write_text("data")
    cases += [(src, tmp_path / "squatted.csv"), (src, tmp_path / "full.csv")]
    before = sorted(tmp_path.iterdir())
    # In the release's order too: a missing key (exit 4) before an existing output (exit 5).
    nokey = [*common[:1], str(tmp_path / "no.key"), *common[2:]]
    refused = [(["perturb", str(src), "-o", str(tmp_path / "old.csv"), *nokey], 4)]
    for given, out in cases:
        refused.append((["perturb", str(given), "-o", str(out), *common], None))
    for args, expected in refused:
        code = main([*args, "--dry-run"])
        preview = capsys.readouterr()
        assert code != 0 and preview.out == "" and code == (expected or code)
        assert sorted(tmp_path.iterdir()) == before
        assert main(args) == code
        assert capsys.readouterr().err.endswith(preview.err) and preview.err.startswith("error:")
    # A bad terminated-postcode file is met before the output's path, by both.
    (tmp_path / "g.ppgraph.terminated.parquet").write_text("not parquet")
    args = ["perturb", str(src), "-o", str(tmp_path / "old.csv"), *common, "--terminated"]
    assert main([*args, "nearest", "--dry-run"]) == main([*args, "nearest"]) == 6
    (tmp_path / "g.ppgraph.terminated.parquet").unlink()
    capsys.readouterr()
    for given, out in ((src, tmp_path / "old.csv"), (late, tmp_path / "late-out.parquet")):
        args = ["perturb", str(given), "-o", str(out), *common, "--force", "--dry-run"]
        assert main(args) == 0 and "2 records, 2 passing" in capsys.readouterr().out
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.slow  # a PostgreSQL server
@pytest.mark.slow  # a PostgreSQL server
def test_a_failed_postgres_connection_says_why_in_words_never_quoting_the_url(
    postgres, tmp_path, capsys
):
    """Every failure to connect said "(OperationalError)", the driver's class name, whatever
    the cause (a hostile review); the driver's own message is never quoted, since it can
    quote the URL and its password."""
    secret = str(tmp_path / "secret.key")
    base = f"postgresql://postgres:SECRETPW@127.0.0.1:{postgres.port}"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]  # (closed again once the probe is)
    for url, reason in [
        (f"{base}/no_such_database", "that database does not exist on the server"),
        (
            f"postgresql://no_such_role:SECRETPW@127.0.0.1:{postgres.port}/postgres",
            "the server has no such user (role)",
        ),
        (f"postgresql://postgres:SECRETPW@127.0.0.1:{closed}/postgres", "no server answered"),
        (
            f"{base}/postgres?no_such_option=SECRETPW",
            "the URL is not a valid PostgreSQL connection",
        ),
        (
            "postgresql://u:SECRETPW@no-such-host.invalid/db",
            "the host name in the URL is not known",
        ),
    ]:
        assert main(["ledger", "show", url, "--ledger-secret", secret]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: cannot connect to the PostgreSQL ledger: {reason}"), err
        assert "SECRETPW" not in err and "Error" not in err, err


def test_a_postgres_write_reads_committed_data_whatever_the_databases_default(postgres, tmp_path):
    """Under a database default of repeatable read, a release waiting for the writer's lock
    kept the snapshot its lock statement took, before the other release committed: it took
    the same release number and was told the ledger was damaged (a hostile review of round
    27).  A write transaction is read committed, whatever the default; reads keep theirs."""
    import psycopg

    where, secret = postgres.new_database(), str(tmp_path / "secret.key")
    database = where.rsplit("/", 1)[1]
    with psycopg.connect(postgres.url("postgres"), autocommit=True) as conn:
        conn.execute(
            f"ALTER DATABASE {database} SET default_transaction_isolation = 'repeatable read'"
        )
    Ledger.init(where, secret).close()
    with Ledger.open(where, secret) as opened:
        with opened.store.write():
            level = opened.store.query("SHOW transaction_isolation")[0][0]
        assert level == "read committed"
        assert opened.summary()["draws"] == 0  # (reads still work under the default)


def test_budget_through_the_cli_names_rows(ledger, location, tmp_path, capsys):
    where, secret = location
    keyfile = tmp_path / "release.key"
    write_key_file(KEY, keyfile)
    graph = tmp_path / "g.ppgraph"
    GRAPH.save(graph)
    src = write_input(tmp_path / "in.csv", ["1", "1"], CODES[:2])
    base = [
        "perturb",
        str(src),
        "--key",
        str(keyfile),
        "--epsilon",
        "1",
        "--id-column",
        "person",
        "--postcode-column",
        "pc",
        "--graph",
        str(graph),
        "--ledger",
        where,
    ]
    base += ["--ledger-secret", secret] if secret else []
    out = tmp_path / "out.csv"
    assert main([*base, "-o", str(out), "--budget", "1"]) == 3
    err = capsys.readouterr().err
    assert "row 2: privacy budget exceeded" in err and not out.exists()
    assert "a record the budget refuses stops it whatever --on-error says" in err
    # The preview exits as the release would (a newcomer's review of round 28: it exited 0).
    assert main([*base, "-o", str(out), "--dry-run", "--budget", "1"]) == 3
    printed = capsys.readouterr()
    assert "1 would be refused by the budget" in printed.out and not out.exists()
    assert "the release would stop: 1 record would take its subject over" in printed.err
    assert main([*base, "-o", str(out), "--dry-run", "--budget", "2"]) == 0
    assert main([*base, "-o", str(out), "--budget", "1", "--on-error", "null"]) == 3
    err = capsys.readouterr().err
    assert "row 2: privacy budget exceeded" in err and "whatever --on-error says" in err
    assert not out.exists()
    assert main([*base, "-o", str(out), "--budget", "2", "--on-error", "null"]) == 0
    show = ["ledger", "show", where, "--json"] + (["--ledger-secret", secret] if secret else [])
    capsys.readouterr()
    assert main(show) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["subjects"] == [{"spend": "2", "count": 1}]
    # The text view shows a budget as the decimal it was given, not as a fraction.
    out2 = tmp_path / "out2.csv"
    assert main([*base, "-o", str(out2), "--budget", "2.4", "--on-error", "null"]) == 0
    capsys.readouterr()
    assert main(show[:-1] if secret is None else [*show[:3], "--ledger-secret", secret]) == 0
    text = capsys.readouterr().out
    assert "budget 2.4" in text and "12/5" not in text


def test_a_dry_run_exits_as_the_release_would_for_records_that_cannot_be_released(tmp_path, capsys):
    options = cli_ledger_release(tmp_path)
    src = write_input(tmp_path / "in.csv", ["1", "2"], [CODES[0], "not a postcode"])
    base = ["perturb", str(src), "-o", str(tmp_path / "out.csv"), *options, "--dry-run"]
    assert main(base) == 3
    assert "the release would stop: 1 record cannot be released" in capsys.readouterr().err
    assert main([*base, "--on-error", "null"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["ledger.db", "ledger.db.key", "release.key", "g.ppgraph", "in.csv"]
    )


def test_the_database_holds_no_identifier_or_postcode(tmp_path):
    where = str(tmp_path / "ledger.db")
    Ledger.init(where).close()
    people = [f"PERSON-{i:04d}-ZQX" for i in range(40)]
    codes = [CODES[i % 36] for i in range(40)]
    src = write_input(tmp_path / "in.csv", people, codes)
    with Ledger.open(where) as ledger:
        release(ledger, src, tmp_path / "out.csv")
        assert ledger.summary()["draws"] == 40
    data = b"".join(p.read_bytes() for p in tmp_path.glob("ledger.db*") if p.suffix != ".key")
    assert len(data) > 4096
    for value in people + codes + [c.replace(" ", "") for c in codes]:
        for form in (value.encode(), value.encode("utf-16-le")):
            assert form not in data
    assert KEY._material not in data and b"PERSON" not in data


# Every column of the database, as docs/ledger.md ("What the ledger stores", "Tables") lists
# them: a column added without the docs saying what it reveals fails here.
DOCUMENTED_COLUMNS = {
    "ledger_meta": ["name", "value"],
    "releases": [
        "id",
        "uid",
        "state",
        "created",
        "committed",
        "owner",
        "output_path",
        "output_sha256",
        "epsilon",
        "radius",
        "graph_sha256",
        "key_fingerprint",
        "output_stability_version",
        "records",
        "new_draws",
        "budget",
    ],
    "draws": ["draw", "subject", "pair", "release"],
    "shared_draws": ["release", "draw", "subject", "pair"],
    "settlements": ["release", "outcome", "settled", "settled_by", "basis"],
}


def test_every_column_is_documented_and_digests_are_all_the_draws_hold(tmp_path):
    import socket

    from postcode_privacy import read_key_file

    where = str(tmp_path / "ledger.db")
    Ledger.init(where).close()
    src = write_input(tmp_path / "in.csv", ["1", "2"], CODES[:2])
    with Ledger.open(where) as ledger:
        release(ledger, src, tmp_path / "out.csv", budget=Fraction(4))
        store = ledger.store
        tables = [
            t
            for (t,) in store.query(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        assert sorted(tables) == sorted(DOCUMENTED_COLUMNS)
        for table, columns in DOCUMENTED_COLUMNS.items():
            assert [r[1] for r in store.query(f"PRAGMA table_info({table})")] == columns
        assert dict(store.query("SELECT name, value FROM ledger_meta")).keys() == {
            "format",
            "schema_version",
            "secret_fingerprint",
            "created",
        }
        for row in store.query("SELECT draw, subject, pair, release FROM draws"):
            assert [type(v) for v in row] == [bytes, bytes, bytes, int]
            assert [len(v) for v in row[:3]] == [16, 16, 16]
        (row,) = store.query(
            "SELECT uid, owner, output_path, key_fingerprint, records, "
            "new_draws, budget FROM releases"
        )
    boot, pid_ns, device_inode, host_pid = row[1].split(";")[1:]
    info = os.stat(tmp_path)  # the output's directory
    assert (boot, pid_ns, device_inode) == (
        BOOT or "-",
        "-" if PID_NS is None else str(PID_NS),
        f"{info.st_dev},{info.st_ino}",
    )
    assert row[1].startswith("owner2;") and host_pid == f"{socket.gethostname()}:{os.getpid()}"
    assert row[2:] == (
        os.path.abspath(tmp_path / "out.csv"),
        KEY.fingerprint,
        2,
        2,
        "4",
    )
    assert len(row[0]) == 32 and int(row[0], 16) >= 0  # random hex
    secret = read_key_file(where + ".key")
    data = b"".join(p.read_bytes() for p in tmp_path.glob("ledger.db*") if p.suffix != ".key")
    assert secret._material not in data and secret.fingerprint.encode() in data


# -- concurrency and crashes (separate processes) ---------------------------------------------


# The command line, stopped (with a marker file made, then sleeping) when the release
# reaches STAGE, if a stage is given: the ledger's ``_reached`` points, replaced here.
_CLI = """
import pathlib, sys, time
from postcode_privacy.cli import main
from postcode_privacy.ledger import recording
stage, marker = sys.argv[1:3]
def reached(at):
    if at == stage:
        pathlib.Path(marker).touch()
        time.sleep(3600)
recording._reached = reached
sys.exit(main(sys.argv[3:]))
"""


def _cli_process(args, pause_at=("", "")):
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", _CLI, *map(str, pause_at), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _perturb_args(tmp_path, location, src, out, epsilon="1"):
    where, secret = location
    keyfile = tmp_path / "release.key"
    if not keyfile.exists():
        write_key_file(KEY, keyfile)
    graph = tmp_path / "g.ppgraph"
    if not graph.exists():
        GRAPH.save(graph)
    args = [
        "perturb",
        str(src),
        "-o",
        str(out),
        "--key",
        str(keyfile),
        "--epsilon",
        epsilon,
        "--id-column",
        "person",
        "--postcode-column",
        "pc",
        "--graph",
        str(graph),
        "--ledger",
        where,
        "-q",
    ]
    return args + (["--ledger-secret", secret] if secret else [])


@pytest.mark.slow  # two concurrent CLI processes per backend
def test_two_concurrent_releases_lose_nothing(ledger, location, tmp_path):
    n = 3000
    people = [str(i) for i in range(n)]
    a = write_input(tmp_path / "a.csv", people, [CODES[i % 36] for i in range(n)])
    b = write_input(tmp_path / "b.csv", people, [CODES[(i + 1) % 36] for i in range(n)])
    procs = [
        _cli_process(
            _perturb_args(tmp_path, location, src, tmp_path / f"{src.stem}-out.csv", epsilon=eps)
        )
        for src, eps in ((a, "1"), (b, "0.5"))
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    summary = ledger.summary()
    assert [r["state"] for r in summary["releases"]] == ["committed", "committed"]
    assert summary["draws"] == 2 * n
    assert spends(summary["subjects"]) == {"1.5": n}


@pytest.mark.slow  # CLI processes killed at each stage
@pytest.mark.parametrize("stage", ["prepared", "renamed"])
def test_a_crash_between_release_and_commit_is_resolved(ledger, location, tmp_path, stage):
    src = write_input(tmp_path / "in.csv", ["1", "2"], CODES[:2])
    out = tmp_path / "out.csv"
    marker = tmp_path / "paused"
    proc = _cli_process(_perturb_args(tmp_path, location, src, out), pause_at=(stage, marker))
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    assert out.exists() == (stage == "renamed")
    pending = ledger.store.query("SELECT state FROM releases")
    assert pending == [("pending",)]
    # While pending, the draws already count (conservatively) for any budget.
    assert spends(ledger.summary()["subjects"]) == {"1": 2}
    where, secret = location
    with Ledger.open(where, secret) as reopened:  # the next command resolves it
        summary = reopened.summary()
    if stage == "renamed":
        assert [r["state"] for r in summary["releases"]] == ["committed"]
        assert summary["draws"] == 2
        assert (
            summary["releases"][0]["output_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
        )
    else:
        assert [r["state"] for r in summary["releases"]] == ["abandoned"]
        assert summary["draws"] == 0 and summary["subjects"] == []


def test_a_failed_release_leaves_no_entry(ledger, tmp_path):
    src = write_input(tmp_path / "in.csv", ["1", ""], CODES[:2])
    with pytest.raises(InputDataError):
        release(ledger, src, tmp_path / "out.csv")
    assert ledger.summary()["releases"] == []


def test_the_budget_is_checked_again_when_recording(ledger, tmp_path):
    plan, slow = screened_plan(ledger, Fraction("1.5"))
    checked = plan.check_records(pd.DataFrame({"person": ["1"], "pc": [CODES[0]]}), 0)
    assert checked.check.counts["over_budget"] == 0  # fits against the ledger as it was
    # Meanwhile another release draws subject 1 elsewhere.
    release(ledger, write_input(tmp_path / "b.csv", ["1"], [CODES[1]]), tmp_path / "b-out.csv")
    with pytest.raises(LedgerError, match="over the budget"):
        slow.prepare(tmp_path / "a-out.csv", "0" * 64)
    summary = ledger.summary()
    assert len(summary["releases"]) == 1 and spends(summary["subjects"]) == {"1": 1}


def test_ledger_options_need_a_ledger(tmp_path, capsys):
    src = write_input(tmp_path / "in.csv", ["1"], [CODES[0]])
    code = main(
        [
            "perturb",
            str(src),
            "-o",
            str(tmp_path / "o.csv"),
            "--epsilon",
            "1",
            "--id-column",
            "person",
            "--postcode-column",
            "pc",
            "--budget",
            "2",
        ]
    )
    assert code == 2 and "need --ledger" in capsys.readouterr().err


def test_abandoning_a_release_keeps_a_draw_another_release_shares(ledger, tmp_path):

    plan, stopped = screened_plan(ledger)
    plan.check_records(pd.DataFrame({"person": ["1"], "pc": [CODES[0]]}), 0)
    stopped.prepare(tmp_path / "never-written.csv", "0" * 64)  # pending, owns the draw
    src = write_input(tmp_path / "b.csv", ["1", "2"], [CODES[0], CODES[1]])
    release(ledger, src, tmp_path / "b-out.csv")  # draws the same record, and one more
    stopped.finish()  # its output never appeared: abandoned
    summary = ledger.summary()
    assert [r["state"] for r in summary["releases"]] == ["abandoned", "committed"]
    assert summary["draws"] == 2 and spends(summary["subjects"]) == {"1": 2}
    assert ledger.store.query("SELECT COUNT(*) FROM shared_draws") == [(0,)]
    # the draw passed to the committed release, which now shows it among its new draws
    assert [r["new_draws"] for r in summary["releases"]] == [1, 2]


# This process's boot id and PID namespace, read as docs/ledger.md says (not by the code under
# test): a pending release's owner is "owner2;BOOT;PIDNS;DEV,INO;HOST:PID".
_BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
BOOT = _BOOT_ID_FILE.read_text().strip() if _BOOT_ID_FILE.exists() else None
PID_NS = os.stat("/proc/self/ns/pid").st_ino if os.path.exists("/proc/self/ns/pid") else None
needs_owner_identity = pytest.mark.skipif(
    BOOT is None or PID_NS is None,
    reason="no boot id or PID namespace here: no pending release is ever abandoned",
)
DEAD_PID = 999_999_999  # above any pid_max: no such process


def owner_text(directory, *, boot=None, pid_ns=None, device_inode=None, host=None, pid=DEAD_PID):
    """The owner a stopped run of this machine writing into ``directory`` recorded, with any
    part replaced."""
    if device_inode is None:
        info = os.stat(directory)
        device_inode = f"{info.st_dev},{info.st_ino}"
    return (
        f"owner2;{boot or BOOT};{pid_ns or PID_NS};{device_inode};"
        f"{host or socket.gethostname()}:{pid}"
    )


def _stopped_release(ledger, tmp_path, name, owner, directory=None):
    """A release left pending by a run that stopped after recording it, as if by ``owner``
    two minutes ago; its output and manifest are written in place in ``directory`` (default
    ``tmp_path``)."""

    plan, recorder = screened_plan(ledger)
    plan.check_records(pd.DataFrame({"person": [name], "pc": [CODES[0]]}), 0)
    directory = tmp_path if directory is None else directory
    out = directory / f"{name}.csv"
    out.write_text("person,pc_dp\n")
    sha = hashlib.sha256(out.read_bytes()).hexdigest()
    recorder.prepare(out, sha)
    manifest = directory / f"{name}.csv.manifest.json"
    manifest.write_text(json.dumps({"output": {"sha256": sha}}))
    ledger.store.execute(
        "UPDATE releases SET owner = ?, created = ? WHERE output_path = ?",
        (owner, "2000-01-01T00:00:00+00:00", os.path.abspath(out)),
    )
    return out, manifest


@needs_owner_identity
def test_a_stopped_release_is_abandoned_only_where_this_machine_can_tell_it_was_not_written(
    location, tmp_path
):
    """A pending release is abandoned only if it ran here and its manifest (renamed into place
    first) is not there: one from another machine, whose files this machine may not see, or
    one whose output was moved after its renames began, stays pending and keeps counting; a
    release of this machine whose renames never began is abandoned (docs/ledger.md,
    "Atomicity")."""
    where, secret = location
    here = owner_text(tmp_path)
    Ledger.init(where, secret).close()
    with Ledger.open(where, secret) as ledger:
        foreign, _ = _stopped_release(ledger, tmp_path, "a", "another-machine:1")
        moved, _ = _stopped_release(ledger, tmp_path, "b", here)
        never, never_manifest = _stopped_release(ledger, tmp_path, "c", here)
        seen, _ = _stopped_release(ledger, tmp_path, "d", "another-machine:2")
    foreign.unlink()  # not visible here
    moved.rename(tmp_path / "elsewhere.csv")
    never.unlink()
    never_manifest.unlink()  # no rename had begun
    with Ledger.open(where, secret) as ledger:
        summary = ledger.summary()
    states = {Path(r["output"]).name: r["state"] for r in summary["releases"]}
    assert states == {
        "a.csv": "pending",
        "b.csv": "pending",
        "c.csv": "abandoned",
        "d.csv": "committed",
    }
    assert spends(summary["subjects"]) == {"1": 3}  # a, b and d count; c does not


@needs_owner_identity
def test_a_stopped_release_is_abandoned_only_if_every_part_of_its_owner_is_this_machines(
    location, tmp_path
):
    """Two machines (containers, VMs, nodes) can share a host name and a ledger, and a process
    id means nothing in another boot or PID namespace: a stopped release whose renames never
    began is abandoned only if its boot id, PID namespace, host name and output directory are
    all this machine's; with any part different or unknown, or an owner in the older
    ``HOST:PID`` format, it stays pending and keeps counting (docs/ledger.md, "Atomicity")."""
    where, secret = location
    host = socket.gethostname()
    other = tmp_path / "other"
    gone = tmp_path / "gone"
    other.mkdir()
    gone.mkdir()
    info = os.stat(other)
    owners = {
        "same": owner_text(tmp_path),
        "boot": owner_text(tmp_path, boot="0" * 8 + "-0000-4000-8000-" + "0" * 12),
        "pidns": owner_text(tmp_path, pid_ns=PID_NS + 1),
        "directory": owner_text(tmp_path, device_inode=f"{info.st_dev},{info.st_ino}"),
        "unknown-boot": owner_text(tmp_path, boot="-"),
        "unknown-pidns": owner_text(tmp_path, pid_ns="-"),
        "unknown-directory": owner_text(tmp_path, device_inode="-"),
        "old-format": f"{host}:{DEAD_PID}",
        "gone": owner_text(gone),
    }
    Ledger.init(where, secret).close()
    with Ledger.open(where, secret) as ledger:
        for name, owner in owners.items():
            out, manifest = _stopped_release(
                ledger, tmp_path, name, owner, gone if name == "gone" else None
            )
            out.unlink()
            manifest.unlink()  # no rename had begun
    gone.rmdir()  # the directory it recorded cannot be looked up here
    with Ledger.open(where, secret) as ledger:
        summary = ledger.summary()
    states = {Path(r["output"]).name: r["state"] for r in summary["releases"]}
    assert states == {
        f"{name}.csv": "abandoned" if name == "same" else "pending" for name in owners
    }
    assert spends(summary["subjects"]) == {"1": len(owners) - 1}


@pytest.mark.parametrize(
    "owner",
    [
        "{host}:99999999999",  # beyond a C int: os.kill would raise OverflowError
        "{host}:+999999999",
        "{host}:\u0663",  # an Arabic-Indic digit, which int() accepts
        "{host}:0",
        "{host}",
        "",
        "owner2;{boot};{pid_ns};{dev_ino};{host}:+999999999",
        "owner2;not-a-boot-id;{pid_ns};{dev_ino};{host}:999999999",
        "owner2;{boot};x;{dev_ino};{host}:999999999",
        "owner2;{boot};{pid_ns};1;{host}:999999999",
        "owner2;{boot};{pid_ns};{dev_ino}",
    ],
)
def test_a_garbled_owner_is_reported_as_damage_and_its_release_stays_pending(
    location, tmp_path, capsys, owner
):
    """An owner that is neither format (a hand edit) is never a reason to abandon a release,
    nor a traceback: every command opening the ledger says it is damaged (exit code 1), and
    the release keeps its draws."""
    where, secret = location
    info = os.stat(tmp_path)
    text = owner.format(
        host=socket.gethostname(),
        boot=BOOT or "-",
        pid_ns=PID_NS or "-",
        dev_ino=f"{info.st_dev},{info.st_ino}",
    )
    Ledger.init(where, secret).close()
    with Ledger.open(where, secret) as ledger:
        out, manifest = _stopped_release(ledger, tmp_path, "1", text)
    out.unlink()
    manifest.unlink()  # no rename had begun
    extra = [] if secret is None else ["--ledger-secret", secret]
    assert main(["ledger", "show", where, *extra]) == 1
    err = capsys.readouterr().err
    assert "the ledger is damaged" in err and "Traceback" not in err
    with Ledger.open(where, secret, resolve=False) as ledger:
        summary = ledger.summary()
    assert [r["state"] for r in summary["releases"]] == ["pending"]
    assert spends(summary["subjects"]) == {"1": 1}


def test_a_release_abandoned_while_it_was_written_is_recorded_and_its_budget_checked_again(
    ledger, tmp_path
):
    """If another process abandons a release's entry while its files are renamed, the release
    records its draws again at commit, checking the budget against the ledger as it now is: the
    files are in place, so the draws are recorded whatever the budget says, and a budget
    exceeded by releases recorded meanwhile is a LedgerError naming the release."""
    from postcode_privacy.ledger import LedgerError

    def pending(person, budget):
        plan, recorder = screened_plan(ledger, budget)
        plan.check_records(pd.DataFrame({"person": [person], "pc": [CODES[0]]}), 0)
        before = ledger.summary()["draws"]
        recorder.prepare(tmp_path / f"{person}-out.csv", "0" * 64)
        rid = ledger.store.query("SELECT MAX(id) FROM releases")[0][0]
        with ledger.store.write():  # as another process judging it dead would
            ledger._abandon_rows(rid)
        assert ledger.summary()["draws"] == before  # its draw no longer counts
        return recorder

    pending("1", Fraction("1.5")).commit()  # nothing recorded meanwhile: within the budget
    summary = ledger.summary()
    assert [r["state"] for r in summary["releases"]] == ["committed"]
    assert [r["new_draws"] for r in summary["releases"]] == [1]
    assert spends(summary["subjects"]) == {"1": 1}

    late = pending("2", Fraction("1.5"))
    # Meanwhile another release draws subject 2 elsewhere: with this one, 2 > 1.5.
    release(ledger, write_input(tmp_path / "b.csv", ["2"], [CODES[1]]), tmp_path / "b-out.csv")
    with pytest.raises(LedgerError, match=r"release #2 exceeds the budget \(budget 1.5\)"):
        late.commit()
    late.finish()  # settled: nothing left to undo
    summary = ledger.summary()
    assert [r["state"] for r in summary["releases"]] == ["committed"] * 3
    assert spends(summary["subjects"]) == {"1": 1, "2": 1}  # the truth, over budget


def _secret_as_key_args(tmp_path, where, key, extra=()):
    src = write_input(tmp_path / "in.csv", ["1"], [CODES[0]])
    graph = tmp_path / "g.ppgraph"
    if not graph.exists():
        GRAPH.save(graph)
    args = ["perturb", str(src), "-o", str(tmp_path / "out.csv"), "--epsilon", "1"]
    args += ["--id-column", "person", "--postcode-column", "pc", "--graph", str(graph)]
    return args + ["--ledger", where, *extra] + ([] if key is None else ["--key", str(key)])


@pytest.mark.parametrize("name", ["same", "symlink", "hardlink", "copy", "environment"])
def test_the_ledger_secret_is_refused_as_the_release_key(tmp_path, capsys, monkeypatch, name):
    """One key for both would let the ledger's keyed digests be linked to the releases: the
    ledger's secret, under any name, as a copy or from $POSTCODE_PRIVACY_KEY, is refused as
    --key (exit code 4) before anything is written or recorded."""
    where = str(tmp_path / "ledger.db")
    Ledger.init(where).close()
    secret = Path(where + ".key")
    key = {"same": secret, "environment": None}.get(name, tmp_path / "k.key")
    if name == "symlink":
        key.symlink_to(secret)
    elif name == "hardlink":
        os.link(secret, key)
    elif name == "copy":
        key.write_bytes(secret.read_bytes())
        key.chmod(0o600)
    elif name == "environment":
        monkeypatch.setenv("POSTCODE_PRIVACY_KEY", secret.read_text())
    for extra in ([], ["--dry-run"], ["--ledger-secret", str(secret)]):
        assert main(_secret_as_key_args(tmp_path, where, key, extra)) == 4
        err = capsys.readouterr().err
        assert "the ledger's secret" in err and "keygen" in err, err
    check = ["ledger", "check", str(tmp_path / "in.csv"), "--ledger", where, "--epsilon", "1"]
    check += ["--id-column", "person", "--postcode-column", "pc"]
    check += ["--graph", str(tmp_path / "g.ppgraph")] + ([] if key is None else ["--key", str(key)])
    assert main(check) == 4
    assert "the ledger's secret" in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()
    with Ledger.open(where) as ledger:
        assert ledger.summary()["releases"] == []


def test_the_ledger_secret_is_refused_as_the_release_key_in_python(ledger, location, tmp_path):
    from postcode_privacy import read_key_file
    from postcode_privacy.ledger import secret_path_for

    where, secret = location
    same = read_key_file(secret_path_for(where, secret))
    src = write_input(tmp_path / "in.csv", ["1"], [CODES[0]])
    with pytest.raises(KeyFileError, match=r"the release key \(key\) is the ledger's secret"):
        release(ledger, src, tmp_path / "out.csv", key=same)
    with pytest.raises(KeyFileError, match=r"the release key \(key\) is the ledger's secret"):
        check(ledger, src, key=same)
    assert not (tmp_path / "out.csv").exists() and ledger.summary()["releases"] == []


def test_recorder_steps_out_of_order_are_refused_with_a_state_error(ledger, tmp_path):
    from postcode_privacy.ledger import LedgerError

    with pytest.raises(LedgerError, match="not attached"):
        LedgerRecorder(ledger).start()
    plan, recorder = screened_plan(ledger)
    with pytest.raises(LedgerError, match="not screened"):
        recorder.report()
    with pytest.raises(LedgerError, match="not screened"):
        recorder.prepare(tmp_path / "out.csv", "0" * 64)
    plan.check_records(pd.DataFrame({"person": ["1"], "pc": [CODES[0]]}), 0)
    assert recorder.report()["new_draws"] == 1
    with pytest.raises(LedgerError, match="not recorded in the ledger before its renames"):
        recorder.commit()
    recorder.finish()  # nothing pending, so nothing to settle
    assert ledger.summary()["releases"] == []


def test_a_file_that_is_not_a_ledger_is_refused_unchanged(tmp_path, capsys):
    """An empty file or another program's SQLite database is refused before anything writes
    to it (opening it as the ledger would give it a header or switch it to WAL mode)."""
    import sqlite3

    Ledger.init(str(tmp_path / "real.db")).close()
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE things (x)")
    conn.close()
    before = {p: p.read_bytes() for p in (empty, other)}
    for path in (empty, other):
        args = ["ledger", "show", str(path), "--ledger-secret", str(tmp_path / "real.db.key")]
        assert main(args) != 0
        err = capsys.readouterr().err
        assert "not a postcode-privacy ledger" in err and "Traceback" not in err
    assert {p: p.read_bytes() for p in (empty, other)} == before


@pytest.mark.slow  # damages a ledger a dozen ways, each opened afresh: about two seconds
def test_a_damaged_ledger_is_called_damaged_not_another_file(tmp_path, capsys):
    """A ledger cut short or with a page overwritten (its index no longer finding the format
    row a scan still finds) was "not a postcode-privacy ledger", whose remedy is another path:
    it is damaged, and the remedy is a backup (a hostile review of round 27).  A database of
    another program with a ``ledger_meta`` table of its own is still not a ledger."""
    import shutil
    import sqlite3

    real = tmp_path / "real.db"
    Ledger.init(str(real)).close()
    size = real.stat().st_size
    cases = {"cut": lambda data: data[: size // 2], "small": lambda data: data[:100]}
    cases["overwritten"] = lambda data: data[:8200] + b"X" * 20 + data[8220:]
    for name, damage in cases.items():
        path = tmp_path / f"{name}.db"
        path.write_bytes(damage(real.read_bytes()))
        shutil.copy(tmp_path / "real.db.key", tmp_path / f"{name}.db.key")
        assert main(["ledger", "show", str(path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: the ledger is damaged:") and "from a backup" in err, name
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE ledger_meta (name TEXT PRIMARY KEY, value TEXT)")
    conn.close()
    shutil.copy(tmp_path / "real.db.key", tmp_path / "other.db.key")
    assert main(["ledger", "show", str(other)]) == 1
    assert "not a postcode-privacy ledger" in capsys.readouterr().err
    # SQLite's first bytes and nothing it can read (SQLITE_NOTADB): a ledger whose header is
    # damaged, or another program's database encrypted but for them.  Either may be so.
    for name, data in (
        ("header", real.read_bytes()[:16] + b"X" * 84 + real.read_bytes()[100:]),
        ("encrypted", b"SQLite format 3\x00" + bytes(range(256)) * 32),
    ):
        (tmp_path / f"{name}.db").write_bytes(data)
        shutil.copy(tmp_path / "real.db.key", tmp_path / f"{name}.db.key")
        assert main(["ledger", "show", str(tmp_path / f"{name}.db")]) == 1
        err = capsys.readouterr().err
        assert "not a postcode-privacy ledger, or is one whose header is damaged" in err, name


@pytest.mark.skipif(os.name != "posix", reason="resource limits are POSIX")
def test_a_ledger_whose_creation_fails_part_way_leaves_nothing_and_no_traceback(tmp_path):
    """A full disk (a file-size limit here) fails the schema's write: the database and the
    key file this call made are both removed, so a second try is not blocked."""
    import subprocess
    import sys

    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (32768, 32768));"
        "from postcode_privacy.cli import main; sys.exit(main(['ledger', 'init', 'L.db']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "cannot create the ledger" in done.stderr
    assert list(tmp_path.iterdir()) == []
    assert main(["ledger", "init", str(tmp_path / "L.db")]) == 0  # a second try is not blocked


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_sqlite_files_beside_a_new_ledger_refuse_it_and_are_left_alone(tmp_path, capsys, suffix):
    """A -wal, -shm or -journal file of another database beside the path (SQLite would read
    a stale -wal as part of the new ledger) refuses the creation up front (exit code 5); the
    file is left as it was and nothing is created."""
    (tmp_path / f"L.db{suffix}").write_text("keep")
    assert main(["ledger", "init", str(tmp_path / "L.db")]) == 5
    err = capsys.readouterr().err
    assert f"SQLite's files of another database are beside that path ({suffix}" in err
    assert [p.name for p in tmp_path.iterdir()] == [f"L.db{suffix}"]
    assert (tmp_path / f"L.db{suffix}").read_text() == "keep"


def test_spend_text_keeps_every_digit_and_budgets_are_bounded():
    """Spends and budgets print exactly (no 28-digit rounding, no exponent cut off), and a budget
    outside 0.0001 .. 1,000,000 is refused at once, never turned into a huge integer."""
    import random
    from decimal import Decimal

    from postcode_privacy.errors import InvalidParameterError
    from postcode_privacy.ledger import parse_budget

    rng = random.Random(3)
    for _ in range(2000):
        value = Fraction(
            rng.randrange(-(10**40), 10**40), 2 ** rng.randrange(0, 60) * 5 ** rng.randrange(0, 60)
        )
        text = spend_text(value)
        assert Fraction(Decimal(text)) == value and "E" not in text.upper()
    assert spend_text(Fraction(1, 3)) == "1/3"
    assert (
        spend_text(Fraction("3.00000000000000000000000000001")) == "3.00000000000000000000000000001"
    )
    assert spend_text(Fraction(10**30)) == "1" + "0" * 30
    assert parse_budget("2.00000000000000000000000000001") == Fraction(
        "2.00000000000000000000000000001"
    )
    for text in ("1e999999999", "1e-999999999", "1e5000", "1000001", "0.00001", "1" * 31):
        with pytest.raises(InvalidParameterError, match="budget"):
            parse_budget(text)


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE releases SET created = 'yesterday', owner = 'elsewhere:1', state = 'pending'",
        "UPDATE releases SET owner = 'somehost:abc', state = 'pending'",
        "UPDATE releases SET budget = 'x'",
        "UPDATE releases SET epsilon = 'abc'",
        "DROP TABLE draws",
    ],
)
def test_a_damaged_ledger_is_one_clear_error(tmp_path, capsys, damage):
    """Values or tables a hand edit broke give exit code 1 and one line saying the ledger is
    damaged, never a traceback or a message about an option the command does not have."""
    import sqlite3

    where = str(tmp_path / "ledger.db")
    Ledger.init(where).close()
    with Ledger.open(where) as ledger:
        release(ledger, write_input(tmp_path / "in.csv", ["1"], [CODES[0]]), tmp_path / "o.csv")
        ledger.store.execute("UPDATE releases SET budget = '1/2'")
    connection = sqlite3.connect(where)
    connection.execute(damage.replace("somehost", socket.gethostname()))
    connection.commit()
    connection.close()
    assert main(["ledger", "show", where]) == 1
    err = capsys.readouterr().err
    assert "the ledger is damaged" in err and "Traceback" not in err and "--epsilon" not in err


def test_ledger_show_prints_budgets_exactly_in_text_and_json(ledger, location, tmp_path, capsys):
    release(ledger, write_input(tmp_path / "in.csv", ["1"], [CODES[0]]), tmp_path / "o.csv")
    ledger.store.execute(
        "UPDATE releases SET budget = ?", (str(Fraction(10**30) + Fraction(1, 2)),)
    )
    where, secret = location
    extra = [] if secret is None else ["--ledger-secret", secret]
    assert main(["ledger", "show", where, *extra]) == 0
    assert "budget 1000000000000000000000000000000.5" in capsys.readouterr().out
    assert main(["ledger", "show", where, *extra, "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["releases"]
    assert entry["budget"] == "1000000000000000000000000000000.5"


def test_ledger_show_names_each_output_by_the_path_the_operator_would_type_here(
    ledger, location, tmp_path, capsys, monkeypatch
):
    """Two releases both called ``release.csv``, in two directories, were one name twice in
    `ledger show`; `settle --committed` wants the output at its recorded path, so show prints
    that path: relative to the current directory when the file lies under it, whole if not."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        given = write_input(tmp_path / name / "in.csv", ["1"], [CODES[0]])
        release(ledger, given, tmp_path / name / "release.csv")
    where, secret = location
    extra = [] if secret is None else ["--ledger-secret", secret]
    monkeypatch.chdir(tmp_path / "a")
    assert main(["ledger", "show", where, *extra]) == 0
    out = capsys.readouterr().out
    assert "  release.csv  " in out
    assert f"  {tmp_path / 'b' / 'release.csv'}  " in out
    assert main(["ledger", "show", where, *extra, "--json"]) == 0
    outputs = [r["output"] for r in json.loads(capsys.readouterr().out)["releases"]]
    assert outputs == [str(tmp_path / name / "release.csv") for name in ("a", "b")]
    # From a removed directory, whole paths (relpath failed there); a directory's name with a
    # line break is shown escaped, never as a line of the listing (reviews of round 29).
    forged = tmp_path / "x\n  #9 committed forged"
    forged.mkdir()
    release(ledger, write_input(forged / "in.csv", ["1"], [CODES[0]]), forged / "r.csv")
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert main(["ledger", "show", where, *extra]) == 0
    out = capsys.readouterr().out
    assert f"  {tmp_path / 'a' / 'release.csv'}  " in out
    assert "\n  #9" not in out and "x\\u000a  #9 committed forged" in out


def test_an_output_path_a_ledger_cannot_record_is_refused_before_any_work(ledger, tmp_path):
    """A release under a directory whose name is not UTF-8 failed as it was being recorded,
    and the error called the ledger damaged, to be restored from a backup (a review of round
    29): such a path is refused first, saying why."""
    from postcode_privacy.errors import InvalidParameterError

    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/d\xff")
    os.mkdir(odd)
    src = write_input(tmp_path / "in.csv", ["1"], [CODES[0]])
    with pytest.raises(InvalidParameterError, match="not valid UTF-8 text"):
        release(ledger, src, os.path.join(odd, "o.csv"))
    assert os.listdir(odd) == [] and ledger.summary()["releases"] == []
    # the dry run's path check refuses it too (it passed a release bound to fail)
    from postcode_privacy.release import ReleaseOptions
    from postcode_privacy.release.files import check_release_paths

    options = ReleaseOptions(epsilon="1", id_column="person", postcode_column="pc")
    with pytest.raises(InvalidParameterError, match="not valid UTF-8 text"):
        check_release_paths(src, os.path.join(odd, "o.csv"), options=options)


def test_a_release_with_a_ledger_from_a_removed_directory_fails_cleanly(
    ledger, location, tmp_path, monkeypatch, capsys
):
    """The ledger's path check ran os.path.abspath in a removed working directory, and the
    run ended in a traceback (a review of round 29); the output's own check says what is
    wrong, as without a ledger."""
    where, secret = location
    src = write_input(tmp_path / "in.csv", ["1"], [CODES[0]])
    key_file = tmp_path / "k.key"
    write_key_file(KEY, key_file)
    graph_file = tmp_path / "g.ppgraph"
    GRAPH.save(graph_file)
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    args = ["perturb", str(src), "-o", "o.csv", "--key", str(key_file), "--graph", str(graph_file)]
    args += ["--epsilon", "1", "--id-column", "person", "--postcode-column", "pc", "-q"]
    args += ["--ledger", where] + ([] if secret is None else ["--ledger-secret", secret])
    assert main(args) == 8
    err = capsys.readouterr().err
    assert "cannot write in the output directory" in err and "Traceback" not in err


def test_a_mistyped_ledger_path_is_named_as_the_ledger_and_an_existing_one_is_not_overwritten(
    tmp_path, capsys
):
    src = write_input(tmp_path / "in.csv", ["1"], [CODES[0]])
    write_key_file(KEY, tmp_path / "release.key")
    args = ["perturb", str(src), "-o", str(tmp_path / "o.csv"), "--epsilon", "1"]
    args += [
        "--key",
        str(tmp_path / "release.key"),
        "--id-column",
        "person",
        "--postcode-column",
        "pc",
        "--ledger",
        str(tmp_path / "no.db"),
    ]
    assert main(args) == 8
    assert "no ledger at that path" in capsys.readouterr().err
    (tmp_path / "dangling.db").symlink_to(tmp_path / "nowhere.db")
    assert main(["ledger", "show", str(tmp_path / "dangling.db")]) == 8
    assert "holds no regular file" in capsys.readouterr().err  # (init would refuse it too)
    where = str(tmp_path / "ledger.db")
    assert main(["ledger", "init", where]) == 0
    (tmp_path / "ledger.db.key").rename(tmp_path / "elsewhere.key")
    assert main(["ledger", "show", where]) == 4
    assert (
        f"the ledger's secret: the key file does not exist: {where}.key" in capsys.readouterr().err
    )
    (tmp_path / "elsewhere.key").rename(tmp_path / "ledger.db.key")
    assert main(["ledger", "init", where]) == 5
    assert "refusing to overwrite" in capsys.readouterr().err


def test_ledger_checks_first_line_does_not_call_records_the_budget_refuses_releasable(capsys):
    """The first line counts the records passing the record checks, of which the lines below
    say how many the budget would refuse ("13 records, 13 releasable" then "1 would be refused
    by the budget" read as a contradiction to a newcomer)."""
    from postcode_privacy.commands.ledger import echo_check

    report = dict(records=13, releasable=13, repeats=10, new_draws_of_known_subjects=1)
    report |= dict(known_subjects_drawn_again=1, new_subjects_records=1, new_subjects=1)
    report |= dict(over_budget=1, unreleasable=0, spend_after_known=[])
    echo_check(report, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "13 records, 13 passing the record checks:"
    assert (
        "  1 would be refused by the budget, which stops the release whatever --on-error "
        "says" in lines
    )


def test_ledger_check_counts_one_in_the_singular(capsys):
    """ "1 are new draws of 1 subjects" read as a slip; one of anything is said in the singular,
    and any other count in the plural."""
    from postcode_privacy.commands.ledger import echo_check

    one = dict(records=1, releasable=1, repeats=1, new_draws_of_known_subjects=1)
    one |= dict(known_subjects_drawn_again=1, new_subjects_records=1, new_subjects=1)
    one |= dict(over_budget=0, unreleasable=0, spend_after_known=[])
    other = one | dict(records=0, releasable=0, repeats=2, new_draws_of_known_subjects=3)
    other |= dict(known_subjects_drawn_again=2, new_subjects_records=0, new_subjects=0)
    expected = {
        "one": [
            "1 record, 1 passing the record checks:",
            "  1 repeats a draw already in the ledger (cost nothing)",
            "  1 is a new draw of 1 subject already in the ledger",
            "  1 belongs to 1 new subject",
        ],
        "other": [
            "0 records, 0 passing the record checks:",
            "  2 repeat a draw already in the ledger (cost nothing)",
            "  3 are new draws of 2 subjects already in the ledger",
            "  0 belong to 0 new subjects",
        ],
    }
    for name, report in (("one", one), ("other", other)):
        echo_check(report, as_json=False)
        assert capsys.readouterr().out.splitlines()[:4] == expected[name]


def _damaged_sqlite_ledger(tmp_path, edit: str, params=()) -> str:
    """A SQLite ledger holding one release of subject 1 under a budget, then ``edit``."""
    import sqlite3

    where = str(tmp_path / "ledger.db")
    Ledger.init(where).close()
    with Ledger.open(where) as ledger:
        src = write_input(tmp_path / "first.csv", ["1"], [CODES[0]])
        release(ledger, src, tmp_path / "first-out.csv", budget="1")
    connection = sqlite3.connect(where)
    connection.execute(edit, params)
    connection.commit()
    connection.close()
    return where


@pytest.mark.parametrize(
    "budget", ["1" + "0" * 5000, "1e999999999", "1/3", " 4 ", "1_0", "+4", "2/4", "0", "-1/2"]
)
def test_a_budget_not_as_written_is_damage_and_never_hangs(tmp_path, capsys, budget):
    """A budget is written as a Fraction's text of a decimal ("3/10"): ten thousand digits
    hung ``ledger show`` (a billion-digit integer) or printed a traceback, and "1/3" or " 4 "
    were shown as budgets."""
    where = _damaged_sqlite_ledger(tmp_path, "UPDATE releases SET budget = ?", (budget,))
    started = time.monotonic()
    assert main(["ledger", "show", where]) == 1
    assert main(["ledger", "show", where, "--json"]) == 1
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert "the ledger is damaged" in err and "Traceback" not in err


@pytest.mark.parametrize("budget", ["3/10", "1000000000000000000000000000001/2", "7"])
def test_budgets_as_written_are_read_exactly(tmp_path, capsys, budget):
    where = _damaged_sqlite_ledger(tmp_path, "UPDATE releases SET budget = ?", (budget,))
    assert main(["ledger", "show", where, "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)["releases"]
    assert Fraction(entry["budget"]) == Fraction(budget)


@pytest.mark.parametrize(
    ("edit", "params"),
    [
        ("UPDATE draws SET subject = hex(subject)", ()),
        ("UPDATE draws SET draw = hex(draw)", ()),
        ("UPDATE draws SET pair = 7", ()),
        ("UPDATE draws SET subject = x'0102030405'", ()),
        ("UPDATE draws SET subject = x''", ()),
        ("INSERT INTO shared_draws SELECT 999, draw, subject, pair FROM draws", ()),
        ("INSERT INTO settlements VALUES (1, 'weird', 'now', 'me', 'a reason')", ()),
        ("INSERT INTO settlements VALUES (999, 'committed', 'now', 'me', 'a reason')", ()),
        ("UPDATE draws SET release = 'first'", ()),
        ("UPDATE releases SET epsilon = ?", (" 0.1 ",)),
        ("UPDATE releases SET budget = ?", ("-1",)),
        ("UPDATE releases SET radius = ?", (-3,)),
        ("UPDATE releases SET records = ?", ("many",)),
        ("UPDATE releases SET new_draws = ?", (-1,)),
        ("DROP TABLE settlements", ()),
    ],
)
def test_a_release_refuses_the_damage_ledger_show_refuses(tmp_path, capsys, edit, params):
    """A release reads only its own subjects' draws: with a subject's digest edited into text
    its earlier spend went unseen and ``--budget`` was overspent; other damage that ``ledger
    show`` refuses was recorded into.  Now the release, its dry run and ``ledger check``
    refuse the same ledger, writing nothing."""
    where = _damaged_sqlite_ledger(tmp_path, edit, params)
    assert main(["ledger", "show", where]) == 1
    src = write_input(tmp_path / "second.csv", ["1"], [CODES[5]])
    out = tmp_path / "second-out.csv"
    args = _perturb_args(tmp_path, (where, None), src, out, epsilon="1")
    assert main([*args, "--budget", "1.5"]) == 1
    assert main([*args, "--budget", "1.5", "--dry-run"]) == 1
    assert not out.exists() and not Path(f"{out}.manifest.json").exists()
    check = ["ledger", "check", str(src), "--ledger", where, "--key", str(tmp_path / "release.key")]
    check += ["--epsilon", "1", "--id-column", "person", "--postcode-column", "pc"]
    assert main([*check, "--graph", str(tmp_path / "g.ppgraph")]) == 1
    err = capsys.readouterr().err
    assert err.count("the ledger is damaged") >= 4 and "Traceback" not in err
