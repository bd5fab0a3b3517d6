"""``postcode-privacy perturb`` and ``demo`` end to end, through ``cli.main``.

Every input problem the user guide lists gives a clear message and a non-zero exit code, and a
failed run leaves no file behind.  Most tests use a small graph artefact; one uses the national
graph (the demo) and one the bundled postcode directory (``--terminated nearest``).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from processes import reaped, wait_until

from postcode_privacy.cli import main
from postcode_privacy.graph.build import build_graph
from postcode_privacy.keyfile import ENV_VAR, write_key_file
from postcode_privacy.mechanism import Key

UNITS = "ABDEFGHJLNPQRSTUWXYZ"
SECRET_ID = "ID-SENTINEL-4471"
SECRET_PC = "QQ9 9QQ"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli")
    codes, east, north = [], [], []
    for r in range(5):
        for c in range(8):
            codes.append(f"BD{r + 1} {c + 1}{UNITS[r]}{UNITS[c]}")
            east.append(410000.0 + 120 * c)
            north.append(432000.0 + 90 * r + (c % 2) * 20)
    graph = build_graph(codes, east, north)
    graph.save(base / "small.ppgraph")
    key_a, key_b = base / "a.key", base / "b.key"
    write_key_file(Key.generate(), key_a)
    write_key_file(Key.generate(), key_b)
    return {
        "graph": str(base / "small.ppgraph"),
        "codes": codes,
        "key": str(key_a),
        "other_key": str(key_b),
        "graph_obj": graph,
    }


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def write_records(path: Path, codes, n=30, overrides=None):
    df = pd.DataFrame(
        {
            "subject": [f"{i:04d}" for i in range(n)],
            "postcode": [codes[(3 * i) % len(codes)] for i in range(n)],
            "visit": [f"2025-01-{1 + i % 28:02d}" for i in range(n)],
        }
    )
    for (row, column), value in (overrides or {}).items():
        df.loc[row, column] = value
    df.to_csv(path, index=False)
    return path


def perturb(setup, src, out, *extra, key=True):
    args = [
        "perturb",
        str(src),
        "-o",
        str(out),
        "--epsilon",
        "1",
        "--id-column",
        "subject",
        "--postcode-column",
        "postcode",
        "--graph",
        setup["graph"],
        "--quiet",
    ]
    if key:
        args += ["--key", setup["key"]]
    return main(args + list(extra))


# What a demo leaves in its directory.
DEMO_FILES = ("records.csv", "records_dp.csv", "records_dp.csv.manifest.json",
              "records_dp.csv.audit.json")  # fmt: skip


def only(directory: Path, *names):
    return sorted(p.name for p in directory.iterdir()) == sorted(names)


# -- end to end ----------------------------------------------------------------------------------


def test_same_key_gives_byte_identical_releases_and_another_key_does_not(setup, tmp_path, capsys):
    src = write_records(tmp_path / "in.csv", setup["codes"], n=60)
    assert perturb(setup, src, tmp_path / "one.csv") == 0
    assert perturb(setup, src, tmp_path / "two.csv", "--chunk-size", "7") == 0
    one, two = (tmp_path / "one.csv").read_bytes(), (tmp_path / "two.csv").read_bytes()
    assert one == two
    assert (
        main(
            [
                "perturb",
                str(src),
                "-o",
                str(tmp_path / "three.csv"),
                "--epsilon",
                "1",
                "--id-column",
                "subject",
                "--postcode-column",
                "postcode",
                "--graph",
                setup["graph"],
                "--key",
                setup["other_key"],
                "-q",
            ]
        )
        == 0
    )
    three = (tmp_path / "three.csv").read_bytes()
    assert three != one
    released_one = pd.read_csv(tmp_path / "one.csv", dtype=str)["postcode_dp"]
    released_three = pd.read_csv(tmp_path / "three.csv", dtype=str)["postcode_dp"]
    assert (released_one != released_three).any()
    assert set(released_one) <= set(setup["codes"])
    m1 = json.loads((tmp_path / "one.csv.manifest.json").read_text())
    m3 = json.loads((tmp_path / "three.csv.manifest.json").read_text())
    assert m1["key_fingerprint"] != m3["key_fingerprint"]
    assert m1["graph"]["sha256"] == setup["graph_obj"].sha256


def test_parquet_release_is_byte_identical_too(setup, tmp_path):
    src = write_records(tmp_path / "in.csv", setup["codes"])
    assert perturb(setup, src, tmp_path / "a.parquet") == 0
    assert perturb(setup, src, tmp_path / "b.parquet") == 0
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_summary_and_keep_source_postcode(setup, tmp_path, capsys):
    src = write_records(tmp_path / "in.csv", setup["codes"], n=5)
    out = tmp_path / "out.csv"
    args = ["perturb", str(src), "-o", str(out), "--key", setup["key"], "--epsilon", "0.5"]
    args += ["--id-column", "subject", "--postcode-column", "postcode", "--graph", setup["graph"]]
    args += ["--keep-source-postcode", "--out-column", "released"]
    umask = os.umask(0)  # (the most permissive: private files must not depend on it)
    try:
        assert main(args) == 0
        stdout = capsys.readouterr().out
        assert "released 5 of 5 records" in stdout and "epsilon 0.5" in stdout
        assert list(pd.read_csv(out).columns) == ["subject", "postcode", "visit", "released"]
        # Not a release: the file and its manifest (whose sha256 of the file is a digest of
        # the true postcodes) are owner-only, even under umask 0; a release's manifest is not.
        for path in (out, tmp_path / "out.csv.manifest.json"):
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert perturb(setup, src, tmp_path / "released.csv") == 0
        released = tmp_path / "released.csv.manifest.json"
        assert stat.S_IMODE(released.stat().st_mode) == 0o666
    finally:
        os.umask(umask)


def test_key_from_the_environment(setup, tmp_path, monkeypatch):
    src = write_records(tmp_path / "in.csv", setup["codes"])
    assert perturb(setup, src, tmp_path / "file.csv") == 0
    monkeypatch.setenv(ENV_VAR, Path(setup["key"]).read_text())
    assert perturb(setup, src, tmp_path / "env.csv", key=False) == 0
    assert (tmp_path / "file.csv").read_bytes() == (tmp_path / "env.csv").read_bytes()
    assert perturb(setup, src, tmp_path / "both.csv") == 0  # the same key twice is fine


def test_environment_and_file_keys_that_differ_are_refused(setup, tmp_path, monkeypatch, capsys):
    src = write_records(tmp_path / "in.csv", setup["codes"])
    monkeypatch.setenv(ENV_VAR, Path(setup["other_key"]).read_text())
    assert perturb(setup, src, tmp_path / "out.csv") == 4
    assert "different keys" in capsys.readouterr().err
    assert only(tmp_path, "in.csv")


def test_an_environment_key_that_names_a_file_says_it_wants_the_file_s_text(
    setup, tmp_path, monkeypatch, capsys
):
    """``POSTCODE_PRIVACY_KEY=release.key`` was told only that it was no key file."""
    src = write_records(tmp_path / "in.csv", setup["codes"])
    monkeypatch.setenv(ENV_VAR, setup["key"])
    assert perturb(setup, src, tmp_path / "out.csv", key=False) == 4
    err = capsys.readouterr().err
    assert "it holds the name of a file, not a key file's text" in err
    assert setup["key"] not in err  # (never echoed: it might have been a key)
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "no-such.key"))  # no file: no such guess
    assert perturb(setup, src, tmp_path / "out.csv", key=False) == 4
    assert "not a postcode-privacy key file" in capsys.readouterr().err
    assert only(tmp_path, "in.csv")


def test_no_key_at_all(setup, tmp_path, capsys):
    src = write_records(tmp_path / "in.csv", setup["codes"])
    assert perturb(setup, src, tmp_path / "out.csv", key=False) == 4
    assert "no key" in capsys.readouterr().err


def test_on_error_null_and_drop_through_the_cli(setup, tmp_path):
    src = write_records(
        tmp_path / "in.csv",
        setup["codes"],
        n=10,
        overrides={(2, "postcode"): "garbage", (5, "subject"): "  "},
    )
    assert perturb(setup, src, tmp_path / "null.csv", "--on-error", "null") == 0
    nulled = pd.read_csv(tmp_path / "null.csv", dtype=str, keep_default_na=False)
    assert len(nulled) == 10 and nulled["postcode_dp"][2] == "" and nulled["postcode_dp"][5] == ""
    assert perturb(setup, src, tmp_path / "drop.csv", "--on-error", "drop") == 0
    dropped = pd.read_csv(tmp_path / "drop.csv", dtype=str, keep_default_na=False)
    assert len(dropped) == 8
    manifest = json.loads((tmp_path / "drop.csv.manifest.json").read_text())
    counts = json.loads((tmp_path / "drop.csv.audit.json").read_text())["counts"]
    assert counts["dropped"] == 2 and counts["malformed_postcode"] == 1
    assert counts["missing_identifier"] == 1 and manifest["on_error"] == "drop"
    assert "counts" not in manifest


def test_duplicate_subject_warning_is_printed(setup, tmp_path, capsys):
    src = write_records(
        tmp_path / "in.csv", setup["codes"], n=6, overrides={(4, "subject"): "0001"}
    )  # 0001 again, at another postcode
    assert perturb(setup, src, tmp_path / "out.csv") == 0
    err = capsys.readouterr().err
    assert "warning: 1 subject identifier(s) appear with more than one postcode" in err
    assert "0001" not in err
    # -q prints no summary, whose last line says its lines are private: the warning says so
    # itself (a review of round 28 found it printed bare).
    assert perturb(setup, src, tmp_path / "quiet.csv", "-q") == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("warning: 1 subject identifier(s) appear with more than one")
    assert lines[1:] == [
        "  the warning above describes the true records: keep it out of published logs"
    ]


def test_quiet_still_warns_that_null_or_drop_applied_and_that_a_kept_source_is_no_release(
    setup, tmp_path, capsys
):
    """`-q` drops the summary, and with it the two lines no release may go without: that the
    release shows which records failed (`null`, `drop`), and that `--keep-source-postcode` made
    a file that must not be published (an audit of round 28 found a quiet run silent)."""
    src = write_records(
        tmp_path / "in.csv", setup["codes"], n=6, overrides={(2, "postcode"): "NOT A CODE"}
    )
    assert perturb(setup, src, tmp_path / "null.csv", "-q", "--on-error", "null") == 0
    printed = capsys.readouterr()
    assert printed.out == "" and "NOT A CODE" not in printed.err
    assert printed.err.splitlines() == [
        "warning: 1 record could not be released: 1 left empty, 0 dropped; the release shows "
        "which (an empty cell, a missing row), and so that its identifier or true postcode was "
        "missing, malformed or not in the graph: the guarantee does not cover that fact",
        "  the warning above describes the true records: keep it out of published logs",
    ]
    kept = ("-q", "--on-error", "drop", "--keep-source-postcode")
    assert perturb(setup, src, tmp_path / "kept.csv", *kept) == 0
    err = capsys.readouterr().err
    assert "warning: NOT a release: --keep-source-postcode kept the true postcodes" in err
    assert "could not be released: 0 left empty, 1 dropped;" in err
    clean = write_records(tmp_path / "clean.csv", setup["codes"], n=6)
    assert perturb(setup, clean, tmp_path / "clean-out.csv", "-q") == 0
    assert capsys.readouterr().err == ""


# -- every input problem: a message and an exit code, and no files ------------------------------


def check_failure(setup, tmp_path, capsys, src, expected_code, *phrases, extra=()):
    out = tmp_path / "out.csv"
    code = perturb(setup, src, out, *extra)
    err = capsys.readouterr().err
    assert code == expected_code, err
    for phrase in phrases:
        assert phrase in err, err
    assert not out.exists() and not (tmp_path / "out.csv.manifest.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    return err


def test_empty_file(setup, tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_bytes(b"")
    check_failure(setup, tmp_path, capsys, src, 3, "the input file is empty")


def test_header_only(setup, tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("subject,postcode,visit\n")
    check_failure(setup, tmp_path, capsys, src, 3, "header but no records")
    check_failure(
        setup, tmp_path, capsys, src, 3, "header but no records", extra=("--on-error", "drop")
    )


def test_missing_column(setup, tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("subject,post_code\n1,BD1 1AA\n")
    err = check_failure(setup, tmp_path, capsys, src, 3, "no column 'postcode'", "it has 2 columns")
    assert "BD1 1AA" not in err
    # A file saved with semicolons (Excel's CSV in many locales) reads as one column; the
    # message said only "(it has 1 columns; does the file start with a header line?)".
    for mark, called in ((";", "semicolons"), ("\t", "tabs")):
        src.write_text(f"subject{mark}postcode\n1{mark}BD1 1AA\n")
        err = check_failure(setup, tmp_path, capsys, src, 3, "(it has 1 column; its header")
        assert f"its header holds {called}: the input must be comma-separated" in err
        assert "BD1 1AA" not in err and f"subject{mark}postcode" not in err


def test_duplicate_column_names(setup, tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("subject,postcode,subject\n1,BD1 1AA,2\n")
    check_failure(setup, tmp_path, capsys, src, 3, "duplicate column names (columns 1 and 3)")


def test_bytes_that_are_not_utf8(setup, tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_bytes(b"subject,postcode\n1,BD1 1AA\n2,BD1 1AB\n3,caf\xe9\n")
    check_failure(setup, tmp_path, capsys, src, 3, "not UTF-8", "line 4 of the file")


def test_ragged_rows(setup, tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("subject,postcode\n1,BD1 1AA\n2,BD1 1AB,extra\n")
    check_failure(
        setup, tmp_path, capsys, src, 3, "record 2 (starting on line 3 of the file) has 3 fields"
    )
    src.write_text("subject,postcode\n1,BD1 1AA,extra\n2,BD1 1AB\n")
    check_failure(
        setup, tmp_path, capsys, src, 3, "record 1 (starting on line 2 of the file) has 3 fields"
    )


def test_blank_and_whitespace_only_identifiers(setup, tmp_path, capsys):
    src = write_records(
        tmp_path / "in.csv",
        setup["codes"],
        n=8,
        overrides={(1, "subject"): "", (6, "subject"): " \t "},
    )
    err = check_failure(
        setup,
        tmp_path,
        capsys,
        src,
        3,
        "2 of 8 records cannot be released",
        "row 2: blank identifier",
        "row 7: blank identifier",
    )
    assert "nothing is released" in err


def test_invalid_and_unknown_postcodes(setup, tmp_path, capsys):
    src = write_records(
        tmp_path / "in.csv",
        setup["codes"],
        n=8,
        overrides={
            (0, "postcode"): "B D 1",
            (3, "postcode"): SECRET_PC,
            (5, "postcode"): "",
            (5, "subject"): SECRET_ID,
        },
    )
    err = check_failure(
        setup,
        tmp_path,
        capsys,
        src,
        3,
        "row 1: not a UK postcode in form",
        "row 4: postcode is well-formed but not in the graph",
        "row 6: missing or blank postcode",
    )
    assert SECRET_PC not in err and SECRET_ID not in err and "B D 1" not in err


def test_many_failing_rows_are_capped(setup, tmp_path, capsys):
    rows = {(i, "postcode"): "nonsense" for i in range(30)}
    src = write_records(tmp_path / "in.csv", setup["codes"], n=40, overrides=rows)
    err = check_failure(setup, tmp_path, capsys, src, 3, "row 20:", "... and 10 more rows")
    assert "row 21:" not in err


@pytest.mark.parametrize("epsilon", ["0", "-1", "nan", "NaN", "abc", "", "inf", "1e400"])
def test_bad_epsilon(setup, tmp_path, capsys, epsilon):
    src = write_records(tmp_path / "in.csv", setup["codes"], n=3)
    out = tmp_path / "out.csv"
    code = main(
        [
            "perturb",
            str(src),
            "-o",
            str(out),
            "--key",
            setup["key"],
            "--epsilon",
            epsilon,
            "--id-column",
            "subject",
            "--postcode-column",
            "postcode",
            "--graph",
            setup["graph"],
            "-q",
        ]
    )
    assert code == 8
    assert "epsilon" in capsys.readouterr().err
    assert only(tmp_path, "in.csv")


def test_existing_output_needs_force(setup, tmp_path, capsys):
    src = write_records(tmp_path / "in.csv", setup["codes"], n=3)
    out = tmp_path / "out.csv"
    out.write_text("precious")
    assert perturb(setup, src, out) == 5
    assert "already exists" in capsys.readouterr().err
    assert out.read_text() == "precious"
    assert perturb(setup, src, out, "--force") == 0
    assert out.read_text().startswith("subject,visit,postcode_dp")


def test_refuses_to_overwrite_the_input(setup, tmp_path, capsys):
    src = write_records(tmp_path / "in.csv", setup["codes"], n=3)
    before = src.read_bytes()
    assert perturb(setup, src, src, "--force") == 5
    assert "input" in capsys.readouterr().err
    assert src.read_bytes() == before


def test_a_missing_input_is_named_with_where_it_was_looked_for(
    setup, tmp_path, capsys, monkeypatch
):
    """ "the input file does not exist" left a newcomer in the wrong directory guessing (a
    newcomer's review of round 28): the message names the path as given and, for a relative
    one, the directory it was looked for in. `perturb --dry-run` and `ledger check` say the
    same."""
    monkeypatch.chdir(tmp_path)
    assert perturb(setup, "demo/records.csv", tmp_path / "out.csv") == 3
    err = capsys.readouterr().err
    assert f"the input file does not exist: demo/records.csv (looked for in {tmp_path})" in err
    missing = tmp_path / "gone.csv"
    assert perturb(setup, missing, tmp_path / "out.csv") == 3
    assert f"the input file does not exist: {missing}\n" in capsys.readouterr().err
    ledger = tmp_path / "l.db"
    assert main(["ledger", "init", str(ledger)]) == 0
    capsys.readouterr()
    dry = ("--dry-run", "--ledger", str(ledger))
    assert perturb(setup, "demo/records.csv", tmp_path / "out.csv", *dry) == 3
    assert "does not exist: demo/records.csv (looked for in" in capsys.readouterr().err
    assert not list(tmp_path.glob("out.csv*"))
    # The key file and a manifest are named the same way (they said only "key file not found"
    # and "the manifest does not exist": a newcomer's review of round 30).
    src = write_records(tmp_path / "in.csv", setup["codes"], n=3)
    assert perturb(setup, src, tmp_path / "out.csv", "--key", "release.key", key=False) == 4
    assert (
        f"the key file does not exist: release.key (looked for in {tmp_path})"
        in capsys.readouterr().err
    )
    assert main(["report", "--manifest", "out.csv.manifest.json", "-o", "r.html"]) != 0
    assert (
        f"the manifest does not exist: out.csv.manifest.json (looked for in {tmp_path})"
        in capsys.readouterr().err
    )
    # And the --graph artefact, which said only "No such file or directory" (a hostile review).
    assert main(["evaluate", "--graph", "g.ppgraph", "--epsilon", "1", "-q"]) == 6
    assert (
        f"the graph artefact does not exist: g.ppgraph (looked for in {tmp_path})"
        in capsys.readouterr().err
    )


def test_output_directory_that_cannot_be_written(setup, tmp_path, capsys):
    src = write_records(tmp_path / "in.csv", setup["codes"], n=3)
    if os.geteuid() == 0:
        target = Path("/sys") / "postcode-privacy-test-out.csv"  # refused even to root
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        target = locked / "out.csv"
    assert perturb(setup, src, target) == 8
    # the directory is named, as "does not exist" names it (a review of round 36)
    assert f"cannot write in the output directory {target.parent}:" in capsys.readouterr().err
    assert not target.exists()
    assert perturb(setup, src, tmp_path / "nowhere" / "out.csv") == 8
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content,phrase",
    [
        (b"", "empty"),
        (None, "truncated"),
        ("hex", "not a postcode-privacy key file"),
    ],
)
def test_bad_key_files(setup, tmp_path, capsys, content, phrase):
    src = write_records(tmp_path / "in.csv", setup["codes"], n=3)
    good = Path(setup["key"]).read_bytes()
    if content is None:
        content = b"\n".join(good.split(b"\n")[:2]) + b"\n"  # the checksum line is missing
    elif content == "hex":
        content = os.urandom(32).hex().encode() + b"\n"
    bad = tmp_path / "bad.key"
    bad.write_bytes(content)
    bad.chmod(0o600)
    code = main(
        [
            "perturb",
            str(src),
            "-o",
            str(tmp_path / "out.csv"),
            "--key",
            str(bad),
            "--epsilon",
            "1",
            "--id-column",
            "subject",
            "--postcode-column",
            "postcode",
            "--graph",
            setup["graph"],
            "-q",
        ]
    )
    assert code == 4
    assert phrase in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()


def test_missing_key_file_and_corrupt_graph(setup, tmp_path, capsys):
    src = write_records(tmp_path / "in.csv", setup["codes"], n=3)
    code = main(
        [
            "perturb",
            str(src),
            "-o",
            str(tmp_path / "out.csv"),
            "--key",
            str(tmp_path / "nope.key"),
            "--epsilon",
            "1",
            "--id-column",
            "subject",
            "--postcode-column",
            "postcode",
            "--graph",
            setup["graph"],
        ]
    )
    assert code == 4
    junk = tmp_path / "junk.ppgraph"
    junk.write_bytes(b"not a graph")
    code = main(
        [
            "perturb",
            str(src),
            "-o",
            str(tmp_path / "out.csv"),
            "--key",
            setup["key"],
            "--epsilon",
            "1",
            "--id-column",
            "subject",
            "--postcode-column",
            "postcode",
            "--graph",
            str(junk),
        ]
    )
    assert code == 6
    assert only(tmp_path, "in.csv", "junk.ppgraph")


# The CLI, paused once its first chunk is in the temporary output: the test signals it there, so
# the signal always lands mid-release (an earlier version polled the file's size and, on a loaded
# machine, sometimes signalled during the final renames, when the release is rightly completed).
RUN_CLI_PAUSED_AFTER_FIRST_CHUNK = """
import sys, time
from pathlib import Path
from postcode_privacy.cli import main
from postcode_privacy.release import writers

paused = Path(sys.argv[1])
write = writers._CsvWriter.write

def write_then_pause(self, frame):
    write(self, frame)
    self._text.flush()
    if not paused.exists():
        paused.touch()
        while True:
            time.sleep(0.1)  # until signalled

writers._CsvWriter.write = write_then_pause
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow  # a CLI process, signalled mid-release
def test_sigterm_leaves_no_partial_output(setup, tmp_path):
    codes = setup["codes"]
    n = 40_000
    pd.DataFrame(
        {
            "subject": [str(i) for i in range(n)],
            "postcode": [codes[i % len(codes)] for i in range(n)],
        }
    ).to_csv(tmp_path / "in.csv", index=False)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    paused = tmp_path / "paused"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            RUN_CLI_PAUSED_AFTER_FIRST_CHUNK,
            str(paused),
            "perturb",
            str(tmp_path / "in.csv"),
            "-o",
            str(out_dir / "out.csv"),
            "--key",
            setup["key"],
            "--epsilon",
            "1",
            "--id-column",
            "subject",
            "--postcode-column",
            "postcode",
            "--graph",
            setup["graph"],
            "--chunk-size",
            "500",
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    with reaped(proc):
        wait_until(paused.exists, proc, "its first chunk was written")
        temps = [p for p in out_dir.iterdir() if p.name.endswith(".tmp")]
        assert len(temps) == 1 and temps[0].stat().st_size > 0  # part of the output written
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert list(out_dir.iterdir()) == []


# -- national graph and bundled directory ---------------------------------------------------------


def test_terminated_nearest_with_the_bundled_directory(tmp_path, capsys, national_graph):
    """A real terminated postcode is mapped to its nearest live neighbour in a small real graph."""
    import numpy as np
    from scipy.spatial import cKDTree

    from postcode_privacy.release.terminated import bundled_terminated_locations

    terminated = bundled_terminated_locations()
    national = national_graph
    row = terminated.iloc[len(terminated) // 2]
    point = np.array([row["easting"], row["northing"]])
    tree = cKDTree(national.location_coordinates)
    _, locs = tree.query(point, k=25)
    nodes = [int(m) for loc in locs for m in national.members(int(loc))]
    xy = national.location_coordinates[national.node_location[nodes]]
    graph = build_graph([national.label(m) for m in nodes], xy[:, 0], xy[:, 1])
    graph.save(tmp_path / "local.ppgraph")

    # Independent answer: brute force over the nodes, smallest distance then smallest index.
    def squared(i):
        e, n = graph.coordinates(graph.label(i))
        return (e - point[0]) ** 2 + (n - point[1]) ** 2

    best = min(range(len(graph)), key=lambda i: (squared(i), i))
    key = tmp_path / "k.key"
    write_key_file(Key.generate(), key)
    pd.DataFrame({"subject": ["a", "b"], "postcode": [row["postcode"], graph.label(best)]}).to_csv(
        tmp_path / "in.csv", index=False
    )
    args = [
        "perturb",
        str(tmp_path / "in.csv"),
        "-o",
        str(tmp_path / "out.csv"),
        "--key",
        str(key),
        "--epsilon",
        "1",
        "--id-column",
        "subject",
        "--postcode-column",
        "postcode",
        "--graph",
        str(tmp_path / "local.ppgraph"),
        "-q",
    ]
    assert main(args) == 3
    err = capsys.readouterr().err
    assert "not in the graph" in err
    assert "; --terminated nearest releases a terminated postcode as the live one nearest it" in err
    assert main(args + ["--terminated", "nearest"]) == 0
    manifest = json.loads((tmp_path / "out.csv.manifest.json").read_text())
    audit = json.loads((tmp_path / "out.csv.audit.json").read_text())
    assert audit["counts"]["terminated_mapped"] == 1 and manifest["terminated"] == "nearest"
    from postcode_privacy import Mechanism
    from postcode_privacy.keyfile import read_key_file

    released = pd.read_csv(tmp_path / "out.csv", dtype=str)["postcode_dp"].tolist()
    mechanism = Mechanism(graph, 1)
    assert released[0] == mechanism.perturb(read_key_file(key), "a", graph.label(best))


def test_demo_runs_the_whole_flow_on_the_national_graph(tmp_path, capsys, national_graph):
    out_dir = tmp_path / "demo"
    assert main(["demo", "-o", str(out_dir), "-q"]) == 0
    stdout = capsys.readouterr().out
    release = pd.read_csv(out_dir / "records_dp.csv", dtype=str, keep_default_na=False)
    manifest = json.loads((out_dir / "records_dp.csv.manifest.json").read_text())
    example = Path(__file__).resolve().parent.parent / "src/postcode_privacy/examples/records.csv"
    records = pd.read_csv(example, dtype=str, keep_default_na=False)
    audit = json.loads((out_dir / "records_dp.csv.audit.json").read_text())
    assert len(release) == len(records) == audit["counts"]["released"]
    assert "counts" not in manifest and "input" not in manifest
    assert "postcode" not in release.columns
    assert release["person_id"].tolist() == records["person_id"].tolist()
    graph = national_graph  # the demo loads the same graph through default_graph()
    assert manifest["graph"]["sha256"] == graph.sha256 and manifest["epsilon"] == "1"
    assert all(graph.find(pc) is not None for pc in release["postcode_dp"])
    assert f"released {len(records)} invented example records" in stdout
    assert "median displacement" in stdout and graph.sha256 in stdout
    # Rows of one person at one postcode get one released postcode.
    joined = records.assign(released=release["postcode_dp"])
    assert joined.groupby("person_id")["released"].nunique().max() == 1
    assert records["person_id"].duplicated().sum() >= 3
    # Keys are throwaway: the output directory holds only the example input (left beside its
    # release for comparison), the release, its manifest and audit file.
    assert only(out_dir, *DEMO_FILES)
    assert (out_dir / "records.csv").read_bytes() == example.read_bytes()
    # The terminal's median is the audit file's (10 m bins), not a second, different figure.
    median = audit["run"]["displacement_m"]["median"]
    assert f"median displacement {median:,} m between" in stdout
    before = (out_dir / "records_dp.csv").read_bytes()
    assert main(["demo", "-o", str(out_dir)]) == 5  # an earlier demo is not replaced ...
    assert (out_dir / "records_dp.csv").read_bytes() == before
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err
    assert "loading the national graph" not in err  # ... and refused before the graph loads
    # A key file where the demo puts its example is never replaced, even with --force.
    from postcode_privacy import Key, write_key_file

    other = tmp_path / "other"
    other.mkdir()
    write_key_file(Key.generate(), other / "records.csv")
    key_bytes = (other / "records.csv").read_bytes()
    for force in (["--force"], []):
        assert main(["demo", "-o", str(other), *force]) == 5
        err = capsys.readouterr().err
        assert "is a postcode-privacy key file; it is never replaced, even with --force" in err
        assert "loading the national graph" not in err  # refused before the graph loads
    assert (other / "records.csv").read_bytes() == key_bytes
    assert only(other, "records.csv")
    dangling = tmp_path / "dangling"  # a link to nowhere is an existing name too
    dangling.mkdir()
    (dangling / "records.csv").symlink_to(tmp_path / "nowhere.csv")
    assert main(["demo", "-o", str(dangling), "-q"]) == 5
    assert (dangling / "records.csv").is_symlink() and not (tmp_path / "nowhere.csv").exists()
    # What the release's own claim refuses even with --force (a directory, a key file at one
    # of its names) is refused before the example is copied: a refused run writes nothing.
    for name, squat, code in [
        ("records_dp.csv", "directory", 8),
        ("records_dp.csv.audit.json", "key file", 5),
    ]:
        taken = tmp_path / f"taken-{code}"
        taken.mkdir()
        if squat == "directory":
            (taken / name).mkdir()
        else:
            write_key_file(Key.generate(), taken / name)
        assert main(["demo", "-o", str(taken), "-q", "--force"]) == code
        assert "loading the national graph" not in capsys.readouterr().err
        assert only(taken, name)


@pytest.mark.parametrize("how", ["stopped", "failed"])
def test_a_demo_that_does_not_finish_leaves_nothing_behind(setup, tmp_path, monkeypatch, how):
    """A Ctrl-C after the demo had made its directory and copied the example left both (a
    hostile review).  Now a demo that is stopped or fails before its release is in place
    removes the copy and the directories it made; a directory that was there stays."""
    import postcode_privacy.graph.national as national
    import postcode_privacy.release as release
    from postcode_privacy.graph.artefact import load_graph

    small = load_graph(setup["graph"])  # (the example's postcodes are not in it: "failed")
    monkeypatch.setattr(national, "default_graph", lambda progress=True: small)
    if how == "stopped":

        def stop(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(release, "release_file", stop)
    code = 130 if how == "stopped" else 3
    out_dir = tmp_path / "new" / "demo"
    assert main(["demo", "-o", str(out_dir), "-q"]) == code
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "mine.txt").write_text("mine")
    assert main(["demo", "-o", str(kept), "-q"]) == code
    assert only(kept, "mine.txt")
    # "x/../empty": "empty" was there and stays, and "x", made on the way, goes (a review)
    (tmp_path / "empty").mkdir()
    assert main(["demo", "-o", str(tmp_path / "x" / ".." / "empty"), "-q"]) == code
    assert (tmp_path / "empty").is_dir() and not (tmp_path / "x").exists()
    # A user's own records.csv that --force replaced is the example now, and is not deleted.
    (kept / "records.csv").write_text("person_id,postcode\n")
    assert main(["demo", "-o", str(kept), "-q", "--force"]) == code
    assert only(kept, "mine.txt", "records.csv")


def test_a_demo_whose_directory_cannot_be_made_leaves_no_parent_behind(tmp_path, capsys):
    """The parents made before a directory that could not be made stayed (a review)."""
    assert main(["demo", "-o", str(tmp_path / "new" / ("n" * 300)), "-q"]) == 8
    assert "cannot create the output directory" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_a_demo_stopped_after_its_release_is_in_place_keeps_it(tmp_path, monkeypatch):
    """A stop after the release's renames ends the run (exit 130), but the release and the
    example beside it are complete and stay."""
    import postcode_privacy.graph.national as national
    import postcode_privacy.release as release

    real = release.release_file

    def release_then_stop(*args, **kwargs):
        real(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(national, "default_graph", lambda progress=True: _example_graph())
    monkeypatch.setattr(release, "release_file", release_then_stop)
    out_dir = tmp_path / "demo"
    assert main(["demo", "-o", str(out_dir), "-q"]) == 130
    assert only(out_dir, *DEMO_FILES)


def _example_graph():
    """A small graph of the example records' own postcodes, laid out on a grid."""
    example = Path(__file__).resolve().parent.parent / "src/postcode_privacy/examples/records.csv"
    from postcode_privacy.postcodes import try_normalise

    written = pd.read_csv(example, dtype=str, keep_default_na=False)["postcode"]
    codes = sorted({c for c in map(try_normalise, written) if c is not None})
    east = [400000.0 + 100 * (i % 10) for i in range(len(codes))]
    north = [400000.0 + 100 * (i // 10) for i in range(len(codes))]
    return build_graph(codes, east, north)


# -- found in review: headerless files, short rows, Parquet row groups, --force pairs ------------


def test_headerless_file_errors_never_echo_the_first_record(setup, tmp_path, capsys):
    first = setup["codes"][0]
    src = tmp_path / "noheader.csv"
    src.write_text(f"000123,{first}\n000124,{setup['codes'][1]}\n", encoding="utf-8")
    err = check_failure(setup, tmp_path, capsys, src, 3, "header line")
    assert "000123" not in err and first not in err
    dup = tmp_path / "noheader_dup.csv"
    dup.write_text(f"000123,{first},{first}\n", encoding="utf-8")
    err = check_failure(setup, tmp_path, capsys, dup, 3, "duplicate column names (columns 2 and 3)")
    assert first not in err


def test_records_with_too_few_fields_are_padded_with_empty_cells(setup, tmp_path):
    """Documented behaviour (docs/release.md): a short record's missing trailing fields are empty
    cells; a missing identifier or postcode is then an ordinary blank-value error."""
    src = tmp_path / "short.csv"
    src.write_text(
        f"subject,postcode,visit\n0001,{setup['codes'][0]}\n0002,{setup['codes'][1]},x\n",
        encoding="utf-8",
    )
    assert perturb(setup, src, tmp_path / "out.csv") == 0
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert out["visit"].tolist() == ["", "x"]
    src.write_text("subject,postcode,visit\n0001\n", encoding="utf-8")
    assert perturb(setup, src, tmp_path / "out2.csv") == 3


def test_parquet_output_bytes_do_not_depend_on_chunk_size(setup, tmp_path):
    src = write_records(tmp_path / "in.csv", setup["codes"], n=300)
    assert perturb(setup, src, tmp_path / "a.parquet", "--chunk-size", "7") == 0
    assert perturb(setup, src, tmp_path / "b.parquet") == 0
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_forced_run_that_fails_between_renames_leaves_no_mismatched_manifest(
    setup, tmp_path, monkeypatch
):
    from postcode_privacy import atomic

    src = write_records(tmp_path / "in.csv", setup["codes"], n=20)
    out = tmp_path / "out.csv"
    assert perturb(setup, src, out) == 0
    real_commit = atomic.TempFile.commit_new

    def failing_commit(self):
        if self.target.name.endswith(".manifest.json"):
            raise OSError(28, "No space left on device")
        real_commit(self)

    monkeypatch.setattr(atomic.TempFile, "commit_new", failing_commit)
    assert perturb(setup, src, out, "--force") != 0
    # The old manifest was removed before the new output moved in, so no manifest describes
    # a file it does not match.
    assert not (tmp_path / "out.csv.manifest.json").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.skipif(os.name != "posix", reason="POSIX permission bits")
def test_a_key_file_readable_by_others_is_refused(setup, tmp_path, capsys):
    src = write_records(tmp_path / "in.csv", setup["codes"], n=3)
    loose = tmp_path / "loose.key"
    loose.write_bytes(Path(setup["key"]).read_bytes())
    loose.chmod(0o644)
    code = main(
        [
            "perturb",
            str(src),
            "-o",
            str(tmp_path / "out.csv"),
            "--key",
            str(loose),
            "--epsilon",
            "1",
            "--id-column",
            "subject",
            "--postcode-column",
            "postcode",
            "--graph",
            setup["graph"],
            "-q",
        ]
    )
    assert code == 4
    assert "chmod 600" in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()


@pytest.mark.parametrize("module", ["postcode_privacy", "postcode_privacy.cli"])
def test_python_dash_m_runs_the_command_line(module):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "output-stability" in result.stdout
    listed = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120
    ).stdout
    for command in ("perturb", "keygen", "report", "ledger"):
        assert command in listed


def test_the_closing_lines_keep_true_data_out_of_the_log(setup, tmp_path, capsys):
    """What ``perturb`` prints often ends up in a job's published log: no displacement (it is
    measured from the true postcodes; the private audit file has it), and a reminder that the
    counts describe the true records."""
    src = write_records(tmp_path / "in.csv", setup["codes"], n=8)
    args = ["perturb", str(src), "-o", str(tmp_path / "out.csv"), "--key", setup["key"]]
    args += ["--epsilon", "1", "--id-column", "subject", "--postcode-column", "postcode"]
    assert main(args + ["--graph", setup["graph"]]) == 0
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert "released 8 of 8 records" in printed and "(publishable)" in printed
    assert "displacement" not in printed and " m, 95th" not in printed
    assert "keep them out of published logs" in printed
    audit = json.loads((tmp_path / "out.csv.audit.json").read_text())
    assert audit["run"]["displacement_m"]["records"] == 8  # where it is kept instead


def test_the_ledger_line_comes_before_the_closing_reminder(setup, tmp_path, capsys):
    """The ledger's count of new draws describes the true records too: the reminder that
    closes the summary must come after it, so that it covers every line above it."""
    from postcode_privacy.ledger import Ledger

    where = str(tmp_path / "ledger.db")
    Ledger.init(where, None).close()
    src = write_records(tmp_path / "in.csv", setup["codes"], n=6)
    args = ["perturb", str(src), "-o", str(tmp_path / "out.csv"), "--key", setup["key"]]
    args += ["--epsilon", "1", "--id-column", "subject", "--postcode-column", "postcode"]
    assert main(args + ["--graph", setup["graph"], "--ledger", where]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2] == "  ledger: 6 new draws recorded"
    assert lines[-1].endswith("keep them out of published logs")
    one = write_records(tmp_path / "one.csv", setup["codes"], n=1)  # (said "1 new draws")
    args[1], args[3] = str(one), str(tmp_path / "one-out.csv")
    assert main(args + ["--graph", setup["graph"], "--ledger", where]) == 0
    assert "  ledger: 0 new draws recorded" in capsys.readouterr().out  # subject 0000 repeats
    fresh = str(tmp_path / "fresh.db")
    Ledger.init(fresh, None).close()
    args[3] = str(tmp_path / "one-again.csv")
    assert main(args + ["--graph", setup["graph"], "--ledger", fresh]) == 0
    assert "  ledger: 1 new draw recorded" in capsys.readouterr().out


def test_keep_source_postcode_is_not_called_a_release_nor_recorded(setup, tmp_path, capsys):
    """An output that keeps the true postcodes is no release: the closing lines say so instead
    of calling its manifest publishable, and a ledger refuses it (from the command line before
    anything is opened, and from Python in ``release_file``)."""
    from postcode_privacy.errors import InvalidParameterError
    from postcode_privacy.ledger import Ledger
    from postcode_privacy.release import release_file

    src = write_records(tmp_path / "in.csv", setup["codes"], n=5)
    args = ["perturb", str(src), "-o", str(tmp_path / "out.csv"), "--key", setup["key"]]
    args += ["--epsilon", "1", "--id-column", "subject", "--postcode-column", "postcode"]
    args += ["--graph", setup["graph"], "--keep-source-postcode"]
    assert main(args) == 0
    printed = "".join(capsys.readouterr())
    assert "NOT a release" in printed and "(publishable)" not in printed
    if os.name == "posix":  # it holds the true postcodes: as private as the audit file
        assert (tmp_path / "out.csv").stat().st_mode & 0o777 == 0o600
    where = str(tmp_path / "ledger.db")
    Ledger.init(where, None).close()
    for extra in ([], ["--dry-run"]):
        out = tmp_path / f"other{len(extra)}.csv"
        code = main([*args[:3], str(out), *args[4:], "--ledger", where, *extra])
        assert code != 0 and not out.exists()
        err = capsys.readouterr().err
        assert "--keep-source-postcode keeps the true postcodes" in err
        assert "cannot be recorded in a ledger" in err
    from postcode_privacy.ledger import LedgerRecorder

    refusal = "^keep_source_postcode keeps the true postcodes.*cannot be recorded in a ledger"
    with Ledger.open(where, None) as ledger, pytest.raises(InvalidParameterError, match=refusal):
        release_file(
            src,
            tmp_path / "py.csv",
            key=Key.from_bytes(bytes(range(1, 33))),
            epsilon=1,
            id_column="subject",
            postcode_column="postcode",
            keep_source_postcode=True,
            ledger=LedgerRecorder(ledger, None),
        )
    assert not (tmp_path / "py.csv").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--epsilon", "0"], "--epsilon must be greater than zero"),
        (["--epsilon", "nan"], "--epsilon must be"),
        (["--epsilon", "1e-9"], "--epsilon below 0.0001"),
        (["--epsilon", "1", "--radius", "0"], "--radius must be from 1"),
    ],
)
def test_parameter_errors_name_the_options_as_typed(setup, tmp_path, capsys, extra, message):
    """On the command line a bad value names its option (``--epsilon``), as the Python API
    names its keyword (``epsilon``)."""
    from graphs import leeds_grid

    from postcode_privacy import Mechanism
    from postcode_privacy.errors import InvalidParameterError

    src = write_records(tmp_path / "in.csv", setup["codes"], n=3)
    args = ["perturb", str(src), "-o", str(tmp_path / "o.csv"), "--key", setup["key"]]
    args += ["--id-column", "subject", "--postcode-column", "postcode", "--graph", setup["graph"]]
    assert main(args + extra) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o.csv").exists()
    with pytest.raises(InvalidParameterError, match=r"^epsilon must be greater than zero"):
        Mechanism(leeds_grid()[0], 0)


@pytest.mark.parametrize("policy", ["null", "drop"])
def test_null_and_drop_say_what_the_release_shows(setup, tmp_path, capsys, policy):
    """An empty cell or a missing row tells anyone that the record's true postcode was
    unusable; the closing lines say so, without naming the record or its value."""
    src = write_records(tmp_path / "in.csv", setup["codes"], n=6, overrides={(2, "postcode"): "ZZ"})
    args = ["perturb", str(src), "-o", str(tmp_path / "out.csv"), "--key", setup["key"]]
    args += ["--epsilon", "1", "--id-column", "subject", "--postcode-column", "postcode"]
    assert main([*args, "--graph", setup["graph"], "--on-error", policy]) == 0
    printed = "".join(capsys.readouterr())
    assert "1 record could not be released" in printed
    assert "the guarantee does not cover that fact" in printed
    assert "ZZ" not in printed and "0002" not in printed


def test_perturb_never_writes_over_the_graph_it_reads_even_with_force(setup, tmp_path, capsys):
    """The input was protected, but the graph artefact was not: ``--graph g.csv -o g.csv
    --force`` replaced the artefact by the release (and likewise through the manifest's or the
    audit file's name, or a hard link)."""
    src = write_records(tmp_path / "in.csv", setup["codes"])
    original = Path(setup["graph"]).read_bytes()
    for graph_name, out_name in (
        ("g.csv", "g.csv"),
        ("out.csv.manifest.json", "out.csv"),
        ("out.csv.audit.json", "out.csv"),
    ):
        graph = tmp_path / graph_name
        graph.write_bytes(original)
        assert perturb(setup, src, tmp_path / out_name, "--force", "--graph", str(graph)) == 5
        assert "the graph artefact this run reads" in capsys.readouterr().err
        assert graph.read_bytes() == original
        graph.unlink()
    graph = tmp_path / "graph.ppgraph"
    graph.write_bytes(original)
    os.link(graph, tmp_path / "linked.csv")
    assert perturb(setup, src, tmp_path / "linked.csv", "--force", "--graph", str(graph)) == 5
    assert "the graph artefact" in capsys.readouterr().err
    assert graph.read_bytes() == original


def test_demo_into_an_empty_path_is_refused_not_the_current_directory(
    tmp_path, capsys, monkeypatch
):
    """``demo -o ''`` wrote its four files into the current directory without a word."""
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "-o", "", "-q"]) == 8
    assert "the output directory's path is empty" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_a_column_name_this_locale_cannot_encode_is_judged_not_raised(setup, tmp_path, capsys):
    """``main([...])`` read column options as their bytes in UTF-8, and text with no bytes
    in this locale (a lone surrogate here; "€" under Latin-1) raised UnicodeEncodeError."""
    src = write_records(tmp_path / "in.csv", setup["codes"])
    args = ["perturb", str(src), "-o", str(tmp_path / "o.csv"), "--key", setup["key"]]
    args += ["--graph", setup["graph"], "--epsilon", "1", "--postcode-column", "postcode"]
    assert main([*args, "--id-column", "\ud800"]) == 8
    assert "--id-column is not valid Unicode text" in capsys.readouterr().err
    assert only(tmp_path, "in.csv")
