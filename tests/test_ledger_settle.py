"""Settling a pending release by hand (docs/ledger.md, "Settling a pending release by hand")."""

from __future__ import annotations

import json
import os
from fractions import Fraction

import pandas as pd
import pytest
from optional import missing_from_this_machine
from test_ledger import (
    CODES,
    _stopped_release,
    location,
    release,
    screened_plan,
    spends,
    write_input,
)

from postcode_privacy.cli import main
from postcode_privacy.ledger import Ledger, LedgerError
from postcode_privacy.ledger.settling import settle_by_hand

__all__ = ["location"]  # the fixture, used by name
FOREIGN = "another-machine:1"  # the older owner format: never settled automatically


def _setup(location, tmp_path, owner=FOREIGN, visible=False):
    where, secret = location
    Ledger.init(where, secret).close()
    with Ledger.open(where, secret) as ledger:
        out, manifest = _stopped_release(ledger, tmp_path, "a", owner)
    published = tmp_path / "published.csv"
    published.write_bytes(out.read_bytes())
    if not visible:  # neither file visible from this machine
        out.unlink()
        manifest.rename(tmp_path / "published.csv.manifest.json")
    with Ledger.open(where, secret) as ledger:
        assert [r["state"] for r in ledger.summary()["releases"]] == ["pending"]
    return where, secret, published


def _settle(where, secret, *args):
    extra = [] if secret is None else ["--ledger-secret", secret]
    return main(["ledger", "settle", where, "1", *extra, *args])


def _states(where, secret):
    with Ledger.open(where, secret) as ledger:
        return ledger.summary()


def test_abandoning_another_machines_entry_removes_its_draws_and_budget_spend(
    location, tmp_path, capsys
):
    where, secret, _ = _setup(location, tmp_path)
    assert _settle(where, secret, "--abandoned", "--yes") == 0
    summary = _states(where, secret)
    assert [r["state"] for r in summary["releases"]] == ["abandoned"]
    assert summary["draws"] == 0
    hand = summary["releases"][0]["settled_by_hand"]
    assert hand["outcome"] == "abandoned" and "@" in hand["settled_by"]
    # Subject "a" spent 1 in the pending release; with it gone, a budget of 1 admits a new draw.
    src = write_input(tmp_path / "b.csv", ["a"], [CODES[5]])
    with Ledger.open(where, secret) as ledger:
        release(ledger, src, tmp_path / "b-out.csv", budget=Fraction(1), on_error="error")
        assert spends(ledger.summary()["subjects"]) == {"1": 1}
    capsys.readouterr()
    extra = [] if secret is None else ["--ledger-secret", secret]
    assert main(["ledger", "show", where, *extra]) == 0
    assert "settled by hand as abandoned" in capsys.readouterr().out
    assert main(["ledger", "show", where, *extra, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["releases"][0]["settled_by_hand"]
    assert shown["outcome"] == "abandoned" and shown["basis"]


def test_committing_with_the_published_file_given(location, tmp_path):
    where, secret, published = _setup(location, tmp_path)
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("other\n")
    assert _settle(where, secret, "--committed") == 1  # no evidence here
    assert _settle(where, secret, "--committed", "--output", str(wrong)) == 1
    assert [r["state"] for r in _states(where, secret)["releases"]] == ["pending"]
    assert _settle(where, secret, "--committed", "--output", str(published)) == 0
    summary = _states(where, secret)
    assert [r["state"] for r in summary["releases"]] == ["committed"]
    assert summary["draws"] == 1
    assert "--output" in summary["releases"][0]["settled_by_hand"]["basis"]


def test_refusals_change_nothing(location, tmp_path, capsys, monkeypatch):
    where, secret, published = _setup(location, tmp_path)
    # Output back at its path with its sha256 (opened without settling it automatically): the
    # release happened, so it cannot be abandoned.
    published.rename(tmp_path / "a.csv")
    with Ledger.open(where, secret, resolve=False) as ledger:
        with pytest.raises(LedgerError, match=r"release #1 .*--committed"):
            settle_by_hand(ledger, 1, "abandoned")
        assert [r["state"] for r in ledger.summary()["releases"]] == ["pending"]
    (tmp_path / "a.csv").unlink()
    # Its manifest back at its place, describing its output: its files were being put in
    # place, and the output may have been moved since (a hostile review of round 27).
    (tmp_path / "published.csv.manifest.json").rename(tmp_path / "a.csv.manifest.json")
    capsys.readouterr()
    assert _settle(where, secret, "--abandoned", "--yes") == 1
    assert "a manifest is at its recorded place that describes its output" in (
        capsys.readouterr().err
    )
    (tmp_path / "a.csv.manifest.json").rename(tmp_path / "published.csv.manifest.json")
    (tmp_path / "a.csv.manifest.json").mkdir()  # nothing readable: it cannot be ruled out
    assert _settle(where, secret, "--abandoned", "--yes") == 1
    assert "or cannot be read" in capsys.readouterr().err
    (tmp_path / "a.csv.manifest.json").rmdir()
    # Without --yes and without a terminal: refused before anything.
    monkeypatch.setattr("sys.stdin.isatty", lambda: False, raising=False)
    assert _settle(where, secret, "--abandoned") == 2
    assert _settle(where, secret) == 2  # neither outcome
    assert _settle(where, secret, "--abandoned", "--committed", "--yes") == 2
    assert [r["state"] for r in _states(where, secret)["releases"]] == ["pending"]
    assert (
        _settle(
            where, secret, "--committed", "--output", str(tmp_path / "published.csv.manifest.json")
        )
        == 1
    )
    assert _settle(where, secret, "--abandoned", "--yes") == 0
    capsys.readouterr()
    assert _settle(where, secret, "--committed") == 1  # not pending any more
    assert "release #1 is abandoned, not pending" in capsys.readouterr().err
    extra = [] if secret is None else ["--ledger-secret", secret]
    assert main(["ledger", "settle", where, "7", "--committed", *extra]) == 1
    assert "no release #7" in capsys.readouterr().err
    # past SQLite's integers: no such release, never "the ledger is damaged"
    assert main(["ledger", "settle", where, str(2**63), "--committed", *extra]) == 2
    assert "damaged" not in capsys.readouterr().err


def test_an_entry_whose_run_is_alive_here_is_not_settled(location, tmp_path, capsys):
    from test_ledger import BOOT, PID_NS, owner_text

    if BOOT is None or PID_NS is None:
        missing_from_this_machine("no boot id or PID namespace here")
    alive = owner_text(tmp_path, pid=os.getppid())
    where, secret, _ = _setup(location, tmp_path, owner=alive)
    assert _settle(where, secret, "--abandoned", "--yes") == 1
    assert "may still be running" in capsys.readouterr().err
    assert [r["state"] for r in _states(where, secret)["releases"]] == ["pending"]


@pytest.mark.parametrize(
    ("offset_s", "settles"),
    [(365 * 86400, True), (30, False), (-30, False), (-120, True)],
    ids=["a-year-ahead", "half-a-minute-ahead", "half-a-minute-ago", "two-minutes-ago"],
)
def test_another_machines_entry_is_running_only_within_a_minute_of_this_clock(
    tmp_path, capsys, offset_s, settles
):
    """A foreign entry recorded "in the future" (the other machine's clock ahead) counted as
    under a minute old until this clock caught up: a year ahead, its draws counted against
    every budget for a year, and it could not be settled by hand (a hostile review)."""
    import datetime as dt

    where, secret, _ = _setup((str(tmp_path / "ledger.db"), None), tmp_path)
    created = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset_s)
    with Ledger.open(where) as ledger, ledger.store.write():
        ledger.store.execute("UPDATE releases SET created = ?", (created.isoformat(),))
    capsys.readouterr()
    assert _settle(where, secret, "--abandoned", "--yes") == (0 if settles else 1)
    if not settles:
        assert "within a minute of this clock" in capsys.readouterr().err
    state = "abandoned" if settles else "pending"
    assert [r["state"] for r in _states(where, secret)["releases"]] == [state]


def test_a_read_only_opening_refuses_to_settle(tmp_path):
    where, secret, _ = _setup((str(tmp_path / "ledger.db"), None), tmp_path)
    with Ledger.open(where, secret, read_only=True) as ledger:
        with pytest.raises(LedgerError, match="opened read-only"):
            settle_by_hand(ledger, 1, "abandoned")
    assert [r["state"] for r in _states(where, secret)["releases"]] == ["pending"]


def test_an_entry_committed_while_the_custodian_confirms_is_not_abandoned(
    location, tmp_path, monkeypatch
):
    where, secret, _ = _setup(location, tmp_path)

    def commit_meanwhile(*args, **kwargs):
        with Ledger.open(where, secret) as other, other.store.write():
            other._commit_rows(1)
        return True

    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    monkeypatch.setattr("click.confirm", commit_meanwhile)
    assert _settle(where, secret, "--abandoned") == 1
    summary = _states(where, secret)
    assert [r["state"] for r in summary["releases"]] == ["committed"]
    assert summary["draws"] == 1 and summary["releases"][0]["settled_by_hand"] is None


def test_abandoning_by_hand_passes_shared_draws_to_heirs(location, tmp_path):

    where, secret = location
    Ledger.init(where, secret).close()
    with Ledger.open(where, secret) as ledger:
        plan, first = screened_plan(ledger)
        plan.check_records(pd.DataFrame({"person": ["1"], "pc": [CODES[0]]}), 0)
        first.prepare(tmp_path / "never.csv", "0" * 64)
        ledger.store.execute(
            "UPDATE releases SET owner = ?, created = ?", (FOREIGN, "2000-01-01T00:00:00+00:00")
        )
        src = write_input(tmp_path / "b.csv", ["1", "2"], [CODES[0], CODES[1]])
        release(ledger, src, tmp_path / "b-out.csv")
    assert _settle(where, secret, "--abandoned", "--yes") == 0
    summary = _states(where, secret)
    assert [r["state"] for r in summary["releases"]] == ["abandoned", "committed"]
    assert summary["draws"] == 2 and [r["new_draws"] for r in summary["releases"]] == [1, 2]


def test_a_version_1_ledger_is_upgraded_when_first_settled_by_hand(tmp_path):
    where, secret, _ = _setup((str(tmp_path / "ledger.db"), None), tmp_path)
    with Ledger.open(where) as ledger, ledger.store.write():
        ledger.store.execute("DROP TABLE settlements")
        ledger.store.execute("UPDATE ledger_meta SET value = '1' WHERE name = 'schema_version'")
    assert _states(where, secret)["releases"][0]["settled_by_hand"] is None  # v1 still read
    assert _settle(where, secret, "--abandoned", "--yes") == 0
    with Ledger.open(where) as ledger, ledger.store.read():
        assert ledger.store.schema_version() == "2"
    assert _states(where, secret)["releases"][0]["settled_by_hand"]["outcome"] == "abandoned"
