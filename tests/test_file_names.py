"""File names under any locale: a release made where Python reads names with another encoding
(the C locale without UTF-8 mode reads a UTF-8 name's non-ASCII bytes as escapes) accepts the
same names, writes the same manifest and records the same ledger path as under UTF-8."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys

import pandas as pd
import pytest
from optional import missing_from_this_machine

from postcode_privacy._file_names import name_text, path_of_text, readable_name
from postcode_privacy.cli import main
from postcode_privacy.graph.build import build_graph
from postcode_privacy.keyfile import write_key_file
from postcode_privacy.mechanism import Key

pytestmark = pytest.mark.skipif(
    sys.getfilesystemencoding() != "utf-8", reason="the suite itself runs under UTF-8"
)

CODES = [f"BD{r + 1} {c + 1}A{'ABDEFGHJ'[c]}" for r in range(4) for c in range(6)]


def test_a_name_reads_as_its_bytes_in_utf8():
    assert name_text("café.csv") == "café.csv"
    assert path_of_text(name_text("café.csv")) == "café.csv"
    latin1 = os.fsdecode(b"caf\xe9.csv")  # bytes no UTF-8 reading has
    assert name_text(latin1) is None
    assert readable_name(latin1) == "caf\\xe9.csv"
    assert readable_name("café.csv") == "café.csv"


@pytest.fixture
def inputs(tmp_path):
    graph = build_graph(CODES, [410000.0 + 100 * i for i in range(24)], [432000.0] * 24)
    graph.save(tmp_path / "g.ppgraph")
    write_key_file(Key.generate(), tmp_path / "k.key")
    records = pd.DataFrame(
        {"id": [str(i) for i in range(12)], "postcode": [CODES[i * 2] for i in range(12)]}
    )
    records.to_csv(tmp_path / "café.csv", index=False)
    records.to_parquet(tmp_path / "café.parquet", index=False)
    return tmp_path


def _perturb(base, source, out, ledger):
    """``perturb`` of ``source`` to ``out`` with the fixture's key and graph, recorded in
    ``ledger``."""
    return [
        "perturb", str(source), "-o", str(out), "--key", str(base / "k.key"),
        "--graph", str(base / "g.ppgraph"), "--epsilon", "1", "--id-column", "id",
        "--postcode-column", "postcode", "--ledger", str(ledger), "-q",
    ]  # fmt: skip


def _release(base, directory, *, locale_env=None):
    """Release both inputs into ``directory`` (CSV and Parquet, recorded in a ledger there),
    in a fresh process under ``locale_env`` or in this one."""
    ledger = directory / "l.db"
    # (a column named outside ASCII too: the same bytes must name it under every locale)
    calls = [["ledger", "init", str(ledger)]] + [
        _perturb(base, base / f"café.{suffix}", directory / f"sortie-é.{suffix}", ledger)
        + ["--out-column", "tiré_dp"]
        for suffix in ("csv", "parquet")
    ]
    for args in calls:
        if locale_env is None:
            assert main(args) == 0
            continue
        env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000", **locale_env}
        done = subprocess.run(
            [sys.executable, "-m", "postcode_privacy", *args],
            env=env,
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr.decode("utf-8", "replace")


def _release_matches_utf8(inputs, monkeypatch, locale_env, encoding, run, utf8_run):
    """Release both inputs into ``inputs/run`` in fresh processes under ``locale_env`` (whose
    file-system encoding must be ``encoding``) and into ``inputs/utf8_run`` in this UTF-8
    process; assert that the releases and manifests are the same bytes."""
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.getfilesystemencoding())"],
        env={**os.environ, **locale_env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == encoding
    (inputs / run).mkdir()
    (inputs / utf8_run).mkdir()
    _release(inputs, inputs / run, locale_env=locale_env)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    _release(inputs, inputs / utf8_run)
    for suffix in ("csv", "parquet"):
        for name in (f"sortie-é.{suffix}", f"sortie-é.{suffix}.manifest.json"):
            assert (inputs / run / name).read_bytes() == (inputs / utf8_run / name).read_bytes()


@pytest.mark.slow  # fresh CLI processes
def test_a_c_locale_release_is_the_utf8_release(inputs, monkeypatch):
    c_locale = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    # (under it, names' non-ASCII bytes arrive as escapes)
    _release_matches_utf8(inputs, monkeypatch, c_locale, "ascii", "c-é", "utf8-é")
    for suffix in ("csv", "parquet"):
        assert '"out": "tiré_dp"' in (
            inputs / "c-é" / f"sortie-é.{suffix}.manifest.json"
        ).read_text("utf-8")
        audit = (inputs / "c-é" / f"sortie-é.{suffix}.audit.json").read_text("utf-8")
        assert f'"path": "café.{suffix}"' in audit
    for run in ("c-é", "utf8-é"):
        with sqlite3.connect(inputs / run / "l.db") as db:
            recorded = sorted(row[0] for row in db.execute("SELECT output_path FROM releases"))
        assert recorded == sorted(
            str(inputs / run / f"sortie-é.{suffix}") for suffix in ("csv", "parquet")
        )
    # `ledger show`, run in the release's directory under the C locale, names it relatively
    shown = subprocess.run(
        [sys.executable, "-m", "postcode_privacy", "ledger", "show", "l.db"],
        env={**os.environ, **c_locale},
        cwd=os.fsencode(inputs / "utf8-é"),
        capture_output=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert " sortie-é.csv " in shown.stdout.decode("utf-8")


def test_the_manifest_names_a_source_by_its_last_name_whatever_it_holds():
    from postcode_privacy.release.manifest import provenance_summary

    summary = provenance_summary(
        {
            "sources": [{"path": "/data/ONSPD_\\xe9.csv", "sha256": "a" * 64}],
            "population": {"path": "C:\\data\\pop.csv", "sha256": "b" * 64},
        }
    )
    assert summary["sources"] == [{"file": "ONSPD_\\xe9.csv", "sha256": "a" * 64}]
    assert summary["population"]["file"] == "pop.csv"


def test_a_name_no_ledger_can_record_is_refused_as_what_it_is(inputs, capsys):
    bad = os.fsdecode(b"out\xe9.csv")
    main(["ledger", "init", str(inputs / "l.db")])
    args = ["--key", str(inputs / "k.key"), "--graph", str(inputs / "g.ppgraph")]
    args += ["--epsilon", "1", "--id-column", "id", "--postcode-column", "postcode"]
    ledger = ["--ledger", str(inputs / "l.db")]
    capsys.readouterr()
    assert main(["perturb", str(inputs / "café.csv"), "-o", str(inputs / bad), *args, *ledger]) == 8
    assert "output file name is not valid UTF-8" in capsys.readouterr().err
    (inputs / os.fsdecode(b"in\xe9.csv")).write_bytes((inputs / "café.csv").read_bytes())
    check = ["ledger", "check", str(inputs / os.fsdecode(b"in\xe9.csv")), *args, *ledger]
    assert main(check) == 8
    assert "input file name is not valid UTF-8" in capsys.readouterr().err
    assert sorted(p.name for p in inputs.iterdir() if p.name.startswith("out")) == []


def test_a_missing_file_is_named_with_its_bytes_as_the_records_give_them(tmp_path, monkeypatch):
    from postcode_privacy._input_files import missing_file_message

    message = missing_file_message("the input", tmp_path / os.fsdecode(b"abs\xe9nt.csv"))
    assert message.endswith("abs\\xe9nt.csv")
    assert "\\udc" not in message
    here = tmp_path / os.fsdecode(b"r\xe9pertoire")
    here.mkdir()
    monkeypatch.chdir(here)
    message = missing_file_message("the input", "in.csv")
    assert message.endswith("r\\xe9pertoire)") and "\\udc" not in message


def _released_with_a_ledger(base):
    """A release recorded in a ledger by a process that has ended; (ledger, output)."""
    ledger, out = base / "l.db", base / "sortie-é.csv"
    assert main(["ledger", "init", str(ledger)]) == 0
    args = _perturb(base, base / "café.csv", out, ledger)
    done = subprocess.run(
        [sys.executable, "-m", "postcode_privacy", *args],
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return ledger, out


def _left_pending(ledger, recorded):
    with sqlite3.connect(ledger) as db:
        db.execute("UPDATE releases SET state = 'pending', output_path = ?", (recorded,))
        return db.execute("SELECT COUNT(*) FROM draws").fetchone()[0]


def _state_and_draws(ledger):
    with sqlite3.connect(ledger) as db:
        state = db.execute("SELECT state FROM releases").fetchone()[0]
        return state, db.execute("SELECT COUNT(*) FROM draws").fetchone()[0]


@pytest.mark.slow  # a CLI process, so that the release's owner has ended
def test_a_row_an_earlier_version_recorded_under_latin1_settles_on_its_output(inputs, capsys):
    # Before names were recorded as UTF-8, a run under Latin-1 stored its reading of the
    # name's bytes: "sortie-Ã©.csv".  The output is in place, so the row is committed.
    ledger, out = _released_with_a_ledger(inputs)
    draws = _left_pending(ledger, str(out).encode("utf-8").decode("latin-1"))
    assert draws > 0
    assert main(["ledger", "show", str(ledger)]) == 0
    assert _state_and_draws(ledger) == ("committed", draws)


@pytest.mark.slow  # a CLI process, so that the release's owner has ended
def test_a_recorded_path_that_is_not_text_is_damage(inputs, capsys):
    ledger, out = _released_with_a_ledger(inputs)
    _left_pending(ledger, os.fsencode(out))  # (a BLOB: no version writes one)
    capsys.readouterr()
    assert main(["ledger", "show", str(ledger)]) == 1
    err = capsys.readouterr().err
    assert "the ledger is damaged" in err and "Traceback" not in err


@pytest.mark.slow  # compiles a locale, fresh CLI processes
def test_a_latin1_locale_release_is_the_utf8_release(inputs, tmp_path, monkeypatch):
    """Under Latin-1 the column options were decoded by the locale: ``--out-column tiré_dp``
    released a column named ``tirÃ©_dp`` (another release and manifest, exit 0)."""
    if shutil.which("localedef") is None:
        missing_from_this_machine("localedef (glibc's locale compiler) is not installed")
    locales = tmp_path / "locales"
    locales.mkdir()
    made = subprocess.run(
        ["localedef", "-i", "en_GB", "-f", "ISO-8859-1", str(locales / "en_GB.ISO-8859-1")],
        capture_output=True,
    )
    if not (locales / "en_GB.ISO-8859-1").is_dir():
        missing_from_this_machine(f"localedef could not compile a Latin-1 locale: {made.stderr!r}")
    latin1 = {
        "LOCPATH": str(locales),
        "LC_ALL": "en_GB.ISO-8859-1",
        "LANG": "en_GB.ISO-8859-1",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
    }
    # (under it, names' and arguments' bytes are read as Latin-1)
    _release_matches_utf8(inputs, monkeypatch, latin1, "iso8859-1", "latin1", "utf8")
    assert (inputs / "latin1" / "sortie-é.csv").read_text("utf-8").startswith("id,tiré_dp\n")
