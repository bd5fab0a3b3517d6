"""Hostile inputs and hostile timing for ``perturb`` and the other commands that write files.

Issue 10 items 5-11 and issue 13 item 5: exclusive output names, pandas-index Parquet, invalid
UTF-8, wide headers, exit codes for damaged files and odd names, a complete release whatever
stdout does, signals during the final renames, ``-o`` of report/evaluate/calibrate, epsilon
text, non-ASCII postcodes, unusable identifiers, line numbers, and messages in CLI terms.
All on a small graph: no national graph.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import json
import lzma
import os
import random
import signal
import subprocess
import sys
import time
from decimal import Decimal, localcontext
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hostile_files import fifo_nobody_writes
from optional import missing_from_this_machine
from processes import reaped, wait_until

from postcode_privacy import InputDataError, InvalidParameterError, Key, OutputExistsError
from postcode_privacy.cli import main
from postcode_privacy.graph.build import build_graph
from postcode_privacy.keyfile import ENV_VAR, write_key_file
from postcode_privacy.mechanism.epsilon import parse_epsilon
from postcode_privacy.mechanism.subject import canonical_subject_id
from postcode_privacy.postcodes import is_normalised, try_normalise
from postcode_privacy.release import release_file

UNITS = "ABDEFGHJLNPQRSTUWXYZ"
RUN_CLI = "import sys; from postcode_privacy.cli import entry_point; entry_point()"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    codes, east, north = [], [], []
    for r in range(4):
        for c in range(6):
            codes.append(f"BD{r + 1} {c + 1}{UNITS[r]}{UNITS[c]}")
            east.append(410000.0 + 120 * c)
            north.append(432000.0 + 90 * r)
    graph = build_graph(codes, east, north)
    graph.save(base / "small.ppgraph")
    write_key_file(Key.from_bytes(b"h" * 32), base / "a.key")
    return {
        "graph": str(base / "small.ppgraph"),
        "graph_obj": graph,
        "codes": codes,
        "key": str(base / "a.key"),
        "key_obj": Key.from_bytes(b"h" * 32),
    }


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def frame(codes, n=20):
    return pd.DataFrame(
        {
            "subject": [f"{i:04d}" for i in range(n)],
            "postcode": [codes[(5 * i) % len(codes)] for i in range(n)],
            "visit": [f"v{i}" for i in range(n)],
        }
    )


def args(setup, src, out, *extra):
    return [
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
        "--key",
        setup["key"],
        "-q",
        *extra,
    ]


def python_options(setup, **extra):
    """The Python API's keywords for the release ``args`` makes on the command line."""
    return dict(
        key=setup["key_obj"],
        epsilon=1,
        id_column="subject",
        postcode_column="postcode",
        graph=setup["graph_obj"],
        **extra,
    )


def perturb(setup, src, out, *extra):
    return main(args(setup, src, out, *extra))


def spawn(setup, src, out, *extra, **kwargs):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop(ENV_VAR, None)
    return subprocess.Popen(
        [sys.executable, "-c", RUN_CLI, *args(setup, src, out, *extra)], env=env, **kwargs
    )


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_bundle(out: Path) -> dict:
    manifest = json.loads(out.with_name(out.name + ".manifest.json").read_text())
    assert manifest["output"]["sha256"] == sha256(out)
    return manifest


# -- item 5: claiming an output is exclusive ----------------------------------------------------


@pytest.mark.slow
def test_two_concurrent_runs_to_one_output_the_second_is_refused(setup, tmp_path):
    codes = setup["codes"]
    frame(codes, 30_000).to_csv(tmp_path / "in.csv", index=False)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "out.csv"
    first = spawn(
        setup,
        tmp_path / "in.csv",
        out,
        "--chunk-size",
        "300",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and first.poll() is None:
            if any(p.name.endswith(".tmp") for p in out_dir.iterdir()):
                # The first run is at work: paused at once while the second runs, so it is
                # surely still at work then (a fast first run had finished during the
                # second's start-up, which is refused too, but as an existing output: not
                # what this test is about).
                first.send_signal(signal.SIGSTOP)
                break
            time.sleep(0.02)
        try:
            # Paused with its claim held: alive, its output not yet in place.
            assert first.poll() is None, "the first run ended before the second could start"
            assert not out.exists(), "the first run finished before it was paused"
            second = spawn(
                setup, tmp_path / "in.csv", out, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            _, err2 = second.communicate(timeout=120)
        finally:
            first.send_signal(signal.SIGCONT)
        _, err1 = first.communicate(timeout=300)
    finally:
        for proc in (first,):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert second.returncode == 5, err2.decode()
    assert "another run is writing" in err2.decode()
    assert first.returncode == 0, err1.decode()
    assert names(out_dir) == ["out.csv", "out.csv.audit.json", "out.csv.manifest.json"]
    assert_bundle(out)
    # Once it is there, a third run without --force is refused and names the file.
    third = spawn(setup, tmp_path / "in.csv", out, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, err3 = third.communicate(timeout=120)
    assert third.returncode == 5
    assert "out.csv already exists; --force replaces it" in err3.decode()


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
@pytest.mark.parametrize("under_nohup", [False, True], ids=["hangup", "under-nohup"])
def test_a_hangup_stops_a_release_as_ctrl_c_does(setup, tmp_path, under_nohup):
    """SIGHUP (a closed terminal, a dropped ssh session) ended a run at once, leaving its
    partial temporary files and its lock file (a hostile review).  It now stops the run as
    Ctrl-C and SIGTERM do: exit 130, nothing left.  Under ``nohup`` it is ignored, as asked."""
    frame(setup["codes"], 30_000).to_csv(tmp_path / "in.csv", index=False)
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    def ignore_hangups() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    run = spawn(
        setup,
        tmp_path / "in.csv",
        out_dir / "out.csv",
        "--chunk-size",
        "300",
        stderr=subprocess.PIPE,
        preexec_fn=ignore_hangups if under_nohup else None,
    )

    def at_work() -> bool:
        return any(p.name.endswith(".tmp") for p in out_dir.iterdir())

    with reaped(run):
        wait_until(at_work, run, "its first temporary file")
        run.send_signal(signal.SIGHUP)
        _, err = run.communicate(timeout=300)
    if under_nohup:
        assert run.returncode == 0, err.decode()
        assert names(out_dir) == ["out.csv", "out.csv.audit.json", "out.csv.manifest.json"]
        assert_bundle(out_dir / "out.csv")
    else:
        assert run.returncode == 130, err.decode()
        assert err.decode().endswith("interrupted\n") and "Traceback" not in err.decode()
        assert names(out_dir) == []


def test_a_held_lock_refuses_even_with_force(setup, tmp_path):
    fcntl = pytest.importorskip("fcntl")
    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    fd = os.open(tmp_path / ".out.csv.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert perturb(setup, src, tmp_path / "out.csv", "--force") == 5
    finally:
        os.close(fd)
    assert perturb(setup, src, tmp_path / "out.csv") == 0  # a stale lock file is harmless
    assert names(tmp_path) == ["in.csv", "out.csv", "out.csv.audit.json", "out.csv.manifest.json"]


@pytest.mark.parametrize(
    "squatter", ["fifo", "dangling link", "link to a file", "directory", "key file", "data"]
)
def test_a_lock_name_taken_by_other_than_a_plain_file_is_refused(setup, tmp_path, capsys, squatter):
    """Something other than a plain file at the lock file's name is refused (exit 5, naming
    the lock file), left as it was, and never followed or waited on.  Found by a hostile
    review: a pipe there blocked the run for ever with its stops held (only SIGKILL ended it),
    and a dangling link made the run create the file it pointed at."""
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    lock = tmp_path / ".out.csv.lock"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pointed = elsewhere / "pointed-at"
    if squatter == "fifo":
        fifo_nobody_writes(lock)
    elif squatter == "directory":
        lock.mkdir()
    elif squatter == "key file":  # the run would delete it when it ends (a review)
        write_key_file(Key.from_bytes(b"k" * 32), lock)
    elif squatter == "data":
        lock.write_bytes(b"somebody's data")
    else:
        if squatter == "link to a file":
            pointed.write_bytes(b"kept")
        lock.symlink_to(pointed)
    before = names(tmp_path)
    if squatter == "fifo":
        # In a process of its own, so that a run blocked on the pipe fails the test, not
        # hangs it.
        process = spawn(setup, src, out, stderr=subprocess.PIPE, text=True)
        try:
            _, err = process.communicate(timeout=60)
        finally:
            process.kill()
        code = process.returncode
    else:
        code = perturb(setup, src, out)
        err = capsys.readouterr().err
    assert code == 5
    taken = "a file with data in it" if squatter in ("key file", "data") else "something other"
    assert f".out.csv.lock, the lock file a run keeps beside out.csv, is taken by {taken}" in err
    assert "Traceback" not in err
    assert names(tmp_path) == before
    assert os.path.lexists(lock)
    if squatter in ("key file", "data"):
        assert lock.stat().st_size > 0
    assert names(elsewhere) == (["pointed-at"] if squatter == "link to a file" else [])
    if squatter == "link to a file":
        assert pointed.read_bytes() == b"kept"


def test_force_removes_a_stale_audit_file_of_the_old_release(setup, tmp_path):
    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    (tmp_path / "out.csv.audit.json").write_text("{}")
    assert perturb(setup, src, tmp_path / "out.csv") == 5
    assert perturb(setup, src, tmp_path / "out.csv", "--force") == 0
    audit = json.loads((tmp_path / "out.csv.audit.json").read_text())  # the new run's own
    assert audit["format"] == "postcode-privacy-audit"


# -- item 6: Parquet written by pandas after filtering ------------------------------------------


def test_pandas_index_parquet_is_kept_as_a_column(setup, tmp_path):
    df = frame(setup["codes"])
    df[df.index.isin([0, 1, 5, 7, 11])].to_parquet(tmp_path / "in.parquet")
    assert "__index_level_0__" in pq.read_schema(tmp_path / "in.parquet").names
    assert perturb(setup, tmp_path / "in.parquet", tmp_path / "out.parquet") == 0
    assert perturb(setup, tmp_path / "in.parquet", tmp_path / "out.csv") == 0
    back_csv = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    back_pq = pd.read_parquet(tmp_path / "out.parquet")
    for back in (back_csv, back_pq):
        assert list(back.columns) == ["subject", "visit", "__index_level_0__", "postcode_dp"]
        assert [int(v) for v in back["__index_level_0__"]] == [0, 1, 5, 7, 11]
    assert back_csv["postcode_dp"].tolist() == back_pq["postcode_dp"].tolist()


def test_a_named_index_holding_the_identifiers_can_be_the_id_column(setup, tmp_path):
    frame(setup["codes"]).set_index("subject").to_parquet(tmp_path / "in.parquet")
    assert perturb(setup, tmp_path / "in.parquet", tmp_path / "out.csv") == 0
    back = pd.read_csv(tmp_path / "out.csv", dtype=str)
    assert back["subject"].tolist() == frame(setup["codes"])["subject"].tolist()


# -- item 7: invalid UTF-8 in Parquet ------------------------------------------------------------


@pytest.mark.parametrize("column", ["subject", "postcode", "visit"])
def test_invalid_utf8_in_parquet_is_a_clean_error_naming_the_record(
    setup, tmp_path, capsys, column
):
    values = {
        "subject": [b"0001", b"0002", b"0003"],
        "postcode": [c.encode() for c in setup["codes"][:3]],
        "visit": [b"a", b"b", b"c"],
    }
    values[column][2] = b"NHS 943 \xff\xfe"
    table = pa.table({k: pa.array(v, pa.binary()).view(pa.string()) for k, v in values.items()})
    pq.write_table(table, tmp_path / "in.parquet")
    assert perturb(setup, tmp_path / "in.parquet", tmp_path / "out.parquet") == 3
    err = capsys.readouterr().err
    assert f"record 3, column {list(values).index(column) + 1}" in err
    assert "not valid UTF-8" in err
    assert "943" not in err and "Traceback" not in err
    assert names(tmp_path) == ["in.parquet"]


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        (pa.binary(), "binary values"),
        (pa.large_binary(), "binary values"),
        (pa.int64(), "whole numbers"),
        (pa.list_(pa.string()), "lists"),
        (pa.dictionary(pa.int32(), pa.binary()), "dictionary-encoded binary values"),
    ],
    ids=["binary", "large-binary", "integers", "lists", "dictionary-of-binary"],
)
def test_a_parquet_postcode_column_that_is_not_text_is_refused_naming_its_type(
    setup, tmp_path, capsys, kind, words
):
    """Postcodes stored as bytes (as some Hive, Impala and Spark settings write text) were each
    refused as "not a UK postcode in form", every record of the file (a hostile review)."""
    codes = setup["codes"][:3]
    if pa.types.is_integer(kind):
        column = pa.array([1, 2, 3], kind)
    elif pa.types.is_list(kind):
        column = pa.array([[c] for c in codes], kind)
    elif pa.types.is_dictionary(kind):
        column = pa.array([c.encode() for c in codes], pa.binary()).dictionary_encode()
    else:
        column = pa.array([c.encode() for c in codes], kind)
    table = pa.table({"subject": ["1", "2", "3"], "postcode": column})
    pq.write_table(table, tmp_path / "in.parquet")
    for on_error in ("error", "drop"):
        out = tmp_path / "out.parquet"
        assert perturb(setup, tmp_path / "in.parquet", out, "--on-error", on_error) == 3
        err = capsys.readouterr().err
        assert f"the postcode column (--postcode-column) holds {words}, not text" in err
        # Bytes of text, however encoded, get the hint (dictionary<binary> lacked it: round 35).
        assert ("cast the column to string" in err) == ("binary" in words), err
        assert codes[0] not in err and "Traceback" not in err
    assert names(tmp_path) == ["in.parquet"]


@pytest.mark.parametrize("encoding", ["large-string", "dictionary", "nulls"])
def test_a_parquet_postcode_column_of_text_or_nulls_is_read_record_by_record(
    setup, tmp_path, capsys, encoding
):
    """Text in another of Arrow's encodings is read as postcodes; a column of nulls is missing
    postcodes, record by record, as in a CSV file (not a column of the wrong type)."""
    codes = setup["codes"][:3]
    column = {
        "large-string": pa.array(codes, pa.large_string()),
        "dictionary": pa.array(codes).dictionary_encode(),
        "nulls": pa.nulls(3),
    }[encoding]
    table = pa.table({"subject": ["1", "2", "3"], "postcode": column})
    pq.write_table(table, tmp_path / "in.parquet")
    code = perturb(setup, tmp_path / "in.parquet", tmp_path / "out.parquet")
    err = capsys.readouterr().err
    assert "not text" not in err
    if encoding == "nulls":
        assert code == 3 and "row 1: missing or blank postcode" in err
    else:
        assert code == 0


# -- item 8: wide headers ------------------------------------------------------------------------


def test_a_header_of_100001_columns_fails_fast_leaving_nothing(setup, tmp_path, capsys):
    header = ",".join(f"c{i}" for i in range(100_001))
    (tmp_path / "in.csv").write_text(header + "\n" + ",".join("x" * 100_001) + "\n")
    start = time.monotonic()
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "out.csv") == 3
    assert time.monotonic() - start < 10
    assert "100,001 columns; at most 10,000" in capsys.readouterr().err
    assert names(tmp_path) == ["in.csv"]


def test_a_huge_header_line_is_refused_before_it_is_read_whole(setup, tmp_path, capsys):
    with open(tmp_path / "in.csv", "w") as handle:
        handle.write("subject,postcode")
        for _ in range(30):
            handle.write("," + "h" * 100_000)
        handle.write("\n")
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "out.csv") == 3
    assert "header line is longer than 1,000,000 characters" in capsys.readouterr().err
    assert names(tmp_path) == ["in.csv"]


def test_a_wide_parquet_file_is_refused(setup, tmp_path, capsys):
    table = pa.table({f"c{i}": pa.array([1], pa.int8()) for i in range(10_001)})
    pq.write_table(table, tmp_path / "in.parquet")
    assert perturb(setup, tmp_path / "in.parquet", tmp_path / "out.csv") == 3
    assert "the input has 10,001 columns; at most" in capsys.readouterr().err
    assert names(tmp_path) == ["in.parquet"]
    # A struct's fields are stored as columns and count, and the message says so, giving
    # the file's own count too (it said "10,003 columns" of a 3-column file; round 28).
    wide = pa.StructArray.from_arrays(
        [pa.array([1], pa.int8())] * 10_001, [f"f{i}" for i in range(10_001)]
    )
    nested = pa.table({"subject": ["1"], "postcode": [setup["codes"][0]], "s": wide})
    pq.write_table(nested, tmp_path / "nested.parquet")
    assert perturb(setup, tmp_path / "nested.parquet", tmp_path / "out.csv") == 3
    assert (
        "the input has 3 columns holding 10,003 stored columns (each field of a nested column "
        "counts)" in capsys.readouterr().err
    )


@pytest.mark.slow  # several releases of a wide file: about two seconds
def test_wide_files_are_read_in_smaller_chunks_with_the_same_output(setup, tmp_path):
    df = frame(setup["codes"], 50)
    for i in range(300):
        df[f"extra{i}"] = str(i)
    df.to_csv(tmp_path / "in.csv", index=False)
    from postcode_privacy.release import reader as release_reader

    reader = release_reader.TableReader(tmp_path / "in.csv", 100_000)
    assert reader.rows_per_chunk == release_reader.MAX_CELLS_PER_CHUNK // 303
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "a.csv") == 0
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "b.csv", "--chunk-size", "7") == 0
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


# -- item 9: exit codes and tracebacks ----------------------------------------------------------

COMPRESSORS = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
@pytest.mark.parametrize("damage", ["truncated-early", "truncated-late", "corrupt-body"])
def test_damaged_compressed_input_is_an_input_error(setup, tmp_path, capsys, suffix, damage):
    codes = setup["codes"]
    rng = np.random.default_rng(1)
    df = frame(codes, 20_000)
    df["visit"] = [rng.bytes(12).hex() for _ in range(len(df))]  # not very compressible
    data = COMPRESSORS[suffix](df.to_csv(index=False).encode())
    if damage == "truncated-early":
        data = data[:60]
    elif damage == "truncated-late":
        data = data[: len(data) * 2 // 3]
    else:
        middle = len(data) // 2
        data = (
            data[:middle]
            + bytes(rng.integers(0, 256, 4000, dtype=np.uint8))
            + data[middle + 4000 :]
        )
    src = tmp_path / f"in.csv{suffix}"
    src.write_bytes(data)
    code = perturb(setup, src, tmp_path / "out.csv")
    err = capsys.readouterr().err
    assert code == 3, err
    assert "Traceback" not in err
    assert names(tmp_path) == [src.name]


@pytest.mark.parametrize("suffix", sorted(COMPRESSORS))
@pytest.mark.parametrize("after", ["a-damaged-stream", "trailing-junk", "another-stream"])
def test_what_follows_a_compressed_stream_is_another_whole_stream_or_refused(
    setup, tmp_path, capsys, suffix, after
):
    """Python's bzip2 and xz readers (and pandas') stop without a word at data after a stream
    that does not start another: the records after it were lost and the release exited 0 (a
    review of round 28).  Such data is refused, as gzip's reader refuses it; a second whole
    stream (and, for xz, stream padding) is read as the rest of the file."""
    compress = COMPRESSORS[suffix]
    df = frame(setup["codes"], 30)
    text = df.to_csv(index=False).encode()
    cut = text.index(b"\n", len(text) // 2) + 1
    first, second = compress(text[:cut]), compress(text[cut:])
    data = {
        "a-damaged-stream": first + b"X" + second[1:],
        "trailing-junk": compress(text) + b"trailing junk",
        "another-stream": first + (b"\0" * 4 if suffix == ".xz" else b"") + second,
    }[after]
    src = tmp_path / f"in.csv{suffix}"
    src.write_bytes(data)
    code = perturb(setup, src, tmp_path / "out.csv")
    err = capsys.readouterr().err
    if after == "another-stream":
        assert code == 0, err
        released = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
        assert released["subject"].tolist() == df["subject"].astype(str).tolist()
        return
    assert code == 3 and "the compressed input is damaged or ends early" in err, err
    assert names(tmp_path) == [src.name]


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
@pytest.mark.parametrize("holds", ["plain text", "another compression"])
def test_a_file_named_compressed_that_is_not_says_so(setup, tmp_path, capsys, suffix, holds):
    """A plain CSV (or another format's data) named ``.csv.gz`` was called "damaged or ends
    early" (a hostile review); the message now says the name promises what the file is not."""
    text = frame(setup["codes"], 5).to_csv(index=False).encode()
    other = {".gz": ".bz2", ".bz2": ".xz", ".xz": ".gz"}[suffix]
    data = text if holds == "plain text" else COMPRESSORS[other](text)
    src = tmp_path / f"in.csv{suffix}"
    src.write_bytes(data)
    assert perturb(setup, src, tmp_path / "out.csv") == 3
    words = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}[suffix]
    assert (
        f"the input's name ends {suffix} but the file does not start as {words} data does"
        in capsys.readouterr().err
    )
    assert names(tmp_path) == [src.name]


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_a_compressed_file_cut_inside_its_first_bytes_is_damaged_not_misnamed(
    setup, tmp_path, capsys, suffix
):
    """One byte of a real compressed file starts as that format does: it is cut short, not
    named for another format (a review)."""
    text = frame(setup["codes"], 5).to_csv(index=False).encode()
    src = tmp_path / f"in.csv{suffix}"
    src.write_bytes(COMPRESSORS[suffix](text)[:1])
    assert perturb(setup, src, tmp_path / "out.csv") == 3
    assert "the compressed input is damaged or ends early" in capsys.readouterr().err


def test_plain_text_starting_with_a_bracket_named_xz_says_so(setup, tmp_path, capsys):
    """0x5d ("]") starts every legacy .lzma stream, so a plain CSV whose header began with
    "]" and was named .xz was called damaged (an open item of round 35).  The header's
    dictionary size and length are now checked as Python's decoder checks them."""
    text = frame(setup["codes"], 5).to_csv(index=False).encode()
    src = tmp_path / "in.csv.xz"
    src.write_bytes(b"]" + text)
    assert perturb(setup, src, tmp_path / "out.csv") == 3
    err = capsys.readouterr().err
    assert "the input's name ends .xz but the file does not start as xz data does" in err, err
    assert names(tmp_path) == [src.name]


@pytest.mark.parametrize("lc", [3, 0])  # (xz's own properties, and others a writer may use)
@pytest.mark.parametrize("cut", [1, 4, 5, 12, 13, 20])
def test_a_legacy_lzma_stream_cut_short_is_damaged_not_misnamed(setup, tmp_path, capsys, cut, lc):
    """A real legacy .lzma stream cut inside (or just after) its 13-byte header is cut short."""
    text = frame(setup["codes"], 5).to_csv(index=False).encode()
    src = tmp_path / "in.csv.xz"
    lzma1 = [{"id": lzma.FILTER_LZMA1, "lc": lc}]
    src.write_bytes(lzma.compress(text, format=lzma.FORMAT_ALONE, filters=lzma1)[:cut])
    assert perturb(setup, src, tmp_path / "out.csv") == 3
    assert "the compressed input is damaged or ends early" in capsys.readouterr().err


@pytest.mark.parametrize(
    "layout", ["padding-of-3", "padding-at-end-of-1", "lzma-then-lzma", "xz-then-lzma"]
)
def test_an_xz_input_is_read_as_xz_reads_one(setup, tmp_path, capsys, layout):
    """Stream padding is whole 4-byte words and only xz streams follow one; ``xz -t`` calls
    anything else corrupt, and a file cut one byte into its padding released half its records
    (a review of this round's reader).  A lone legacy .lzma stream is still read."""
    df = frame(setup["codes"], 30)
    text = df.to_csv(index=False).encode()
    cut = text.index(b"\n", len(text) // 2) + 1
    xz = lzma.compress

    def alone(data):
        return lzma.compress(data, format=lzma.FORMAT_ALONE)

    data = {
        "padding-of-3": xz(text[:cut]) + b"\0" * 3 + xz(text[cut:]),
        "padding-at-end-of-1": xz(text) + b"\0",
        "lzma-then-lzma": alone(text[:cut]) + alone(text[cut:]),
        "xz-then-lzma": xz(text[:cut]) + alone(text[cut:]),
    }[layout]
    src = tmp_path / "in.csv.xz"
    src.write_bytes(data)
    assert perturb(setup, src, tmp_path / "out.csv") == 3
    assert "the compressed input is damaged or ends early" in capsys.readouterr().err
    assert names(tmp_path) == [src.name]
    src.write_bytes(alone(text))
    assert perturb(setup, src, tmp_path / "out.csv") == 0


@pytest.mark.parametrize("fmt", [".csv", ".parquet"])
def test_a_column_option_of_bytes_that_are_not_utf8_is_refused_before_work(
    setup, tmp_path, capsys, fmt
):
    """``--out-column $'pc\\xff'`` reached the writer and crashed with a traceback (a review of
    round 28): every column option must be text a file can hold, said in the CLI's terms."""
    from postcode_privacy import perturb_frame

    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    odd = os.fsdecode(b"pc\xff")  # what Python makes of the argument's bytes
    for option in ("--out-column", "--id-column"):
        code = perturb(setup, src, tmp_path / f"out{fmt}", option, odd)
        err = capsys.readouterr().err
        assert code == 8, err
        assert f"{option} is not valid Unicode text" in err and "Traceback" not in err
        assert odd not in err and "xff" not in err.lower() and "dcff" not in err.lower()
        assert names(tmp_path) == ["in.csv"]
    with pytest.raises(InvalidParameterError, match="out_column is not valid Unicode text"):
        perturb_frame(frame(setup["codes"]), **python_options(setup), out_column="pc\udcff")


def test_a_first_column_name_starting_with_a_byte_order_mark_reads_back_unchanged(setup, tmp_path):
    """A CSV release whose first column's name starts with U+FEFF began with the bytes of a
    byte-order mark, which every reader drops, so the name came back without it (a review of
    round 28): the name is quoted, and the file starts with the quote."""
    codes = setup["codes"]
    parquet = tmp_path / "in.parquet"
    names_in = ["\ufeffnote", "subject", "postcode"]
    table = pa.table({"\ufeffnote": ["a", "b"], "subject": ["1", "2"], "postcode": codes[:2]})
    pq.write_table(table, parquet)
    twice = tmp_path / "twice.csv"  # a CSV file written with a mark before a name of that kind
    twice.write_bytes(b"\xef\xbb\xbf" + f"\ufeffnote,subject,postcode\na,1,{codes[0]}\n".encode())
    for src in (parquet, twice):
        out = tmp_path / f"{src.stem}-out.csv"
        assert perturb(setup, src, out) == 0
        assert out.read_bytes().startswith('"\ufeffnote"'.encode())
        back = pd.read_csv(out, dtype=str, keep_default_na=False)
        assert list(back.columns) == [*names_in[:2], "postcode_dp"]
        assert back["\ufeffnote"].tolist() == ["a", "b"][: len(back)]


def test_an_output_name_too_long_for_its_manifest_is_refused_before_work(setup, tmp_path, capsys):
    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    for length in (242, 250, 255, 256, 304):
        out = tmp_path / ("a" * (length - 4) + ".csv")
        assert perturb(setup, src, out) == 8
        # the same room whichever name overflows: the output's own or one beside it
        err = capsys.readouterr().err
        assert (
            f"output file name is too long: with the files written beside it it may have at most 241 bytes, it has {length}"
            in err
        )
    # 241 bytes is the longest that leaves room for ".manifest.json" on a 255-byte file system.
    assert perturb(setup, src, tmp_path / ("b" * 237 + ".csv")) == 0
    assert len(names(tmp_path)) == 4  # input, output, manifest, audit file


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS refuses non-UTF-8 file names itself")
def test_a_name_with_no_room_for_its_lock_file_gets_the_length_message(tmp_path):
    """A single-file output (report, evaluate, calibrate) of 250 bytes leaves no room for its
    lock file ``.NAME.lock``: the length message, not the system's "File name too long"."""
    from postcode_privacy.atomic import OutputClaim
    from postcode_privacy.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="may have at most 249 bytes, it has 250"):
        with OutputClaim([tmp_path / ("r" * 245 + ".json")]):
            pass
    assert list(tmp_path.iterdir()) == []


def test_file_names_that_are_not_utf8_are_refused_before_work(setup, tmp_path, capsys, monkeypatch):
    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    bad = os.fsdecode(b"out\xff.csv")

    def no_graph(*a, **k):
        raise AssertionError("the graph was loaded before the names were checked")

    monkeypatch.setattr("postcode_privacy.graph.Graph.load", no_graph)
    assert perturb(setup, src, tmp_path / bad) == 8
    assert "not valid UTF-8" in capsys.readouterr().err
    os.link(src, tmp_path / os.fsdecode(b"in\xfe.csv"))
    assert perturb(setup, tmp_path / os.fsdecode(b"in\xfe.csv"), tmp_path / "out.csv") == 8
    assert names(tmp_path) == sorted(["in.csv", os.fsdecode(b"in\xfe.csv")])


@pytest.mark.slow  # three CLI processes
@pytest.mark.parametrize("stdout", ["closed", "broken-pipe", "full"])
def test_a_complete_release_exits_0_whatever_stdout_does(setup, tmp_path, stdout):
    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    out = tmp_path / "out.csv"
    argv = [a for a in args(setup, src, out) if a != "-q"]  # with the summary on stdout
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    if stdout == "closed":
        proc = subprocess.run(
            [
                "/bin/sh",
                "-c",
                'code="$1"; shift; "$0" -c "$code" "$@" >&-',
                sys.executable,
                RUN_CLI,
                *argv,
            ],
            env=env,
            stderr=subprocess.PIPE,
            timeout=120,
        )
        code, err = proc.returncode, proc.stderr
    elif stdout == "full":
        code, err = _on_a_full_stdout(argv)
    else:
        proc = subprocess.Popen(
            [sys.executable, "-c", RUN_CLI, *argv],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        proc.stdout.close()  # the reader goes away before anything is printed
        err = proc.stderr.read()
        proc.stderr.close()
        code = proc.wait(timeout=120)
    assert code == 0, err.decode()
    assert b"Traceback" not in err and b"Exception ignored" not in err
    assert_bundle(out)


def _on_a_full_stdout(argv, cwd=None):
    """Exit code and stderr (bytes) of the CLI run with its stdout on a full disk."""
    if not os.path.exists("/dev/full"):
        missing_from_this_machine("no /dev/full here")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-c", RUN_CLI, *argv],
            cwd=cwd,
            env=env,
            stdout=full,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    return proc.returncode, proc.stderr


@pytest.mark.parametrize(
    "command", [["example"], ["keygen", "-o", "k.key"], ["ledger", "init", "l.db"]]
)
def test_a_stdout_that_cannot_be_written_is_one_clear_error_not_a_traceback(tmp_path, command):
    """With stdout on a full disk a command whose output is what it prints says so, exit code
    1, without a traceback (a hostile review found tracebacks from every command but
    perturb).  One that prints only lines about the files it has written (``keygen``,
    ``ledger init``) lets them go and exits 0, its file written, as ``perturb`` and ``build``
    do: an exit code 1 sent a script to run it again, which then refused to replace the key
    (a review of round 36)."""
    code, err = _on_a_full_stdout(command, cwd=tmp_path)
    assert b"Traceback" not in err
    if command[0] == "example":
        assert code == 1 and b"standard output could not be written" in err
    else:
        assert code == 0 and err == b"", err
        assert (tmp_path / command[-1]).exists()


def _with_stdout_closed(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The command line run in ``cwd`` with its standard output closed (``>&-``)."""
    return subprocess.run(
        ["/bin/sh", "-c", 'code="$1"; shift; "$0" -c "$code" "$@" >&-', sys.executable, RUN_CLI]
        + command,
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        stderr=subprocess.PIPE,
        timeout=120,
    )


@pytest.mark.slow  # command-line processes
@pytest.mark.parametrize(
    "command", [["keygen", "-o", "k.key"], ["ledger", "init", "l.db"], ["example"]]
)
def test_a_closed_stdout_is_the_same_clear_error_as_a_full_one(tmp_path, command):
    """Python sets ``sys.stdout`` to None for a standard output closed at the start, and click
    then drops what a command prints without a word: ``ledger show >&-`` exited 0 having
    shown nothing (a hostile review).  It is now the same error as a full disk's, and, as
    there, the lines about files written are let go."""
    proc = _with_stdout_closed(command, tmp_path)
    err = proc.stderr.decode()
    assert "Traceback" not in err
    if command[0] == "example":
        assert proc.returncode == 1, err
        assert "standard output could not be written (standard output is closed)" in err
    else:
        assert proc.returncode == 0 and err == "", err
        assert (tmp_path / command[-1]).exists()


@pytest.mark.slow  # command-line processes
def test_the_lines_about_files_written_are_let_go_with_stdout_closed(tmp_path):
    """``build`` (and ``demo``) printed what they had written with click, so a closed standard
    output failed a complete build, where ``perturb`` and ``report`` let such lines go (a
    review).  Every command that reports the files it wrote now lets those lines go."""
    onspd = Path(__file__).parent / "fixtures" / "sources" / "ONSPD_FEB_2024_UK.csv"
    command = ["build", "--onspd", str(onspd), "--gb-only", "-o", "g.ppgraph", "-q"]
    proc = _with_stdout_closed(command, tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert (tmp_path / "g.ppgraph").exists()


@pytest.mark.slow  # command-line processes
@pytest.mark.parametrize(
    "command", [["example"], ["keygen", "-o", "k.key"], ["--help"], ["--version"], ["demo", "-h"]]
)
def test_a_reader_that_goes_away_ends_the_command_as_sigpipe_would(tmp_path, command):
    """With its reader gone (``example | head -1``), click ended a command with exit code 1
    and no word, or 0, as the timing fell (a hostile review).  It now ends as a writer killed
    by SIGPIPE does: 141, nothing said; any file it writes was written first."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_CLI, *command],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # the reader goes away before anything is printed
    err = proc.stderr.read().decode()
    proc.stderr.close()
    # (keygen's lines are about the key it has written: let go, as perturb's are)
    assert proc.wait(timeout=120) == (0 if command[0] == "keygen" else 141), err
    assert err == ""
    if command[0] == "keygen":
        assert (tmp_path / "k.key").exists()


@pytest.mark.parametrize("argv, expected", [(["--version"], 0), (["perturb", "missing.csv"], 2)])
def test_the_command_line_ends_as_a_normal_exit_would(tmp_path, argv, expected):
    """``entry_point`` skips the interpreter's teardown (``cli._exit_without_teardown``) but
    keeps what a normal exit does: a non-daemon thread still at work finishes, an idle thread
    pool nobody shut down is stopped, exit handlers run, output still buffered is written, and
    the command's exit code is the process's."""
    marker = tmp_path / "thread.txt"
    program = (
        "import atexit, concurrent.futures, sys, threading, time\n"
        f"def late(): time.sleep(0.5); open({str(marker)!r}, 'w').write('finished')\n"
        "threading.Thread(target=late).start()\n"
        "pool = concurrent.futures.ThreadPoolExecutor(1)\n"  # kept alive, never shut down
        "pool.submit(time.sleep, 0).result()\n"
        "atexit.register(lambda: print('exit handler ran', file=sys.stderr))\n"
        "sys.stdout.write('x' * 100000)\n"
        "from postcode_privacy.cli import entry_point; entry_point()\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, "-c", program, *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=60,  # a join that waits for ever (an idle pool told nothing) fails here
    )
    assert proc.returncode == expected, proc.stderr.decode()
    assert proc.stdout.startswith(b"x" * 100000)
    if expected == 0:
        assert b"postcode-privacy" in proc.stdout[100000:]
    assert marker.read_text() == "finished"
    assert proc.stderr.rstrip().endswith(b"exit handler ran")
    assert b"Traceback" not in proc.stderr


def test_a_profiler_watching_the_command_line_still_writes_its_results(tmp_path):
    profile = tmp_path / "cli.prof"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cProfile",
            "-o",
            str(profile),
            "-m",
            "postcode_privacy",
            "--version",
        ],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"postcode-privacy" in proc.stdout
    assert profile.stat().st_size > 0


def test_sigterm_during_the_final_renames_never_splits_the_release(
    setup, tmp_path, monkeypatch, capsys
):
    """A signal arriving just after the output's rename: the manifest must still follow, and
    the run must not claim that nothing was written."""
    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    out = tmp_path / "out.csv"
    real = {"link": os.link, "replace": os.replace}
    sent = []

    def then_signal(name):
        def move(source, target, *a, **k):
            real[name](source, target, *a, **k)
            if Path(target).name == "out.csv" and not sent:
                sent.append(True)
                os.kill(os.getpid(), signal.SIGTERM)

        return move

    monkeypatch.setattr(os, "link", then_signal("link"))
    monkeypatch.setattr(os, "replace", then_signal("replace"))
    code = main([a for a in args(setup, src, out) if a != "-q"])
    captured = capsys.readouterr()
    assert sent
    assert code == 0, captured.err
    assert "they are all in place and complete" in captured.err
    assert "released 20 of 20 records" in captured.out
    assert_bundle(out)
    assert names(tmp_path) == ["in.csv", "out.csv", "out.csv.audit.json", "out.csv.manifest.json"]


def test_an_eof_error_escaping_a_command_is_not_reported_as_an_interruption(
    setup, monkeypatch, capsys
):
    import postcode_privacy.commands.perturb as command

    def truncated(*a, **k):
        raise EOFError

    monkeypatch.setattr(command, "resolve_key", truncated)
    assert (
        main(
            [
                "perturb",
                "x.csv",
                "-o",
                "y.csv",
                "--epsilon",
                "1",
                "--id-column",
                "a",
                "--postcode-column",
                "b",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "ended unexpectedly" in err and "interrupted" not in err


# -- item 10: report / evaluate / calibrate -o ---------------------------------------------------

OTHER_COMMANDS = {
    "report": ["report", "--epsilon", "1"],
    "evaluate": ["evaluate", "--epsilon", "1"],
    "calibrate": ["calibrate", "--target", "median-displacement-km=1"],
}


@pytest.mark.parametrize("command", sorted(OTHER_COMMANDS))
def test_other_commands_refuse_an_existing_file_and_never_replace_a_key(
    command, tmp_path, setup, capsys
):
    missing_graph = str(tmp_path / "no-such.ppgraph")  # the claim must come before the load
    existing = tmp_path / "existing.json"
    existing.write_text("keep me")
    argv = OTHER_COMMANDS[command] + ["--graph", missing_graph, "-q"]
    assert main(argv + ["-o", str(existing)]) == 5
    assert "existing.json already exists; --force replaces it" in capsys.readouterr().err
    assert existing.read_text() == "keep me"
    key = tmp_path / "secret.key"
    write_key_file(Key.generate(), key)
    before = key.read_bytes()
    assert main(argv + ["-o", str(key), "--force"]) == 5
    assert "is a postcode-privacy key file; it is never replaced, even with --force" in (
        capsys.readouterr().err
    )
    assert key.read_bytes() == before
    # nor a ledger, whatever its name (a SQLite database is never a release)
    ledger = tmp_path / "ledger.json"
    assert main(["ledger", "init", str(ledger)]) == 0
    before = ledger.read_bytes()
    assert main(argv + ["-o", str(ledger), "--force"]) == 5
    assert "is a SQLite database (a ledger?); it is never replaced, even with --force" in (
        capsys.readouterr().err
    )
    assert ledger.read_bytes() == before
    # nor a pipe (nor a device: `-o /dev/null --force` as root replaced the device node)
    pipe = tmp_path / "pipe.json"
    fifo_nobody_writes(pipe)
    assert main(argv + ["-o", str(pipe), "--force"]) == 5
    assert "is not a regular file (a pipe, a device or a socket); it is never replaced" in (
        capsys.readouterr().err
    )
    assert pipe.is_fifo()
    pipe.unlink()
    # With --force an ordinary file may be replaced: the run goes on to load the graph.
    assert main(argv + ["-o", str(existing), "--force"]) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "existing.json",
        "ledger.json",
        "ledger.json.key",
        "secret.key",
    ]


@pytest.mark.parametrize("command", sorted(OTHER_COMMANDS))
def test_other_commands_replace_only_a_file_of_no_kind_of_their_own_even_with_force(
    command, tmp_path, setup, capsys
):
    """A hostile review of round 28: ``report -o rel.csv --force`` replaced a release (its
    manifest left describing a file that was gone), ``calibrate -o rel.csv.audit.json`` its
    private audit file, ``evaluate -o <the cached national graph> --force`` the graph it had
    just read, and a key file with a blank line before its header (which the key reader
    accepts) was not recognised as one.  Each is now refused, exit 5, and left as it was."""
    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    release = tmp_path / "rel.csv"
    assert perturb(setup, src, release) == 0
    key = tmp_path / "blank-first.key"
    key.write_bytes(b"\n \t" + Path(setup["key"]).read_bytes())
    key.chmod(0o600)
    assert perturb(setup, src, tmp_path / "with-blank-key.csv", "--key", str(key)) == 0
    table = tmp_path / "table.npy"
    np.save(table, np.arange(3))
    graph = tmp_path / "copy.ppgraph"
    graph.write_bytes(Path(setup["graph"]).read_bytes())
    sidecar = tmp_path / "copy.ppgraph.terminated.parquet"
    sidecar.write_bytes(b"PAR1")
    header = tmp_path / "profiles.json"
    header.write_text('{"format": "postcode-privacy-location-profiles/1"}')
    assert main(["ledger", "init", str(tmp_path / "l.db")]) == 0
    wal = tmp_path / "l.db-wal"
    wal.write_bytes(b"\x37\x7f\x06\x82")
    # Read as report --manifest reads it: re-saved sorted, minified, with a byte-order mark
    # (a review of this round's first version, which knew only the bytes it writes).
    assert perturb(setup, src, tmp_path / "again.csv") == 0
    for document in ("again.csv.manifest.json", "again.csv.audit.json"):
        parsed = json.loads((tmp_path / document).read_text())
        resaved = json.dumps(parsed, sort_keys=True, separators=(",", ":"))
        (tmp_path / document).write_bytes(b"\xef\xbb\xbf" + resaved.encode())
    kinds = {
        release: "a release (its manifest is beside it)",
        tmp_path / "rel.csv.manifest.json": "a release's manifest",
        tmp_path / "rel.csv.audit.json": "a release's private audit file",
        tmp_path / "again.csv": "a release (its manifest is beside it)",
        tmp_path / "again.csv.manifest.json": "a release's manifest",
        tmp_path / "again.csv.audit.json": "a release's private audit file",
        key: "a postcode-privacy key file",
        table: "a NumPy array file",
        graph: "a graph artefact",
        sidecar: "the terminated postcodes build keeps beside a graph artefact",
        header: "the header of one of the engine's cached tables",
        wal: "one of SQLite's files beside a database",
    }
    argv = OTHER_COMMANDS[command] + ["--graph", str(setup["graph"]), "-q"]
    capsys.readouterr()
    for target, kind in kinds.items():
        before = target.read_bytes()
        assert main(argv + ["-o", str(target), "--force"]) == 5, target
        err = capsys.readouterr().err
        assert f"is {kind}" in err and "never replaced, even with --force" in err, err
        assert target.read_bytes() == before
    # perturb replaces its own release with --force, and build its own graph.
    assert perturb(setup, src, release, "--force", "--epsilon", "2") == 0
    assert json.loads((tmp_path / "rel.csv.manifest.json").read_text())["epsilon"] == "2"


def test_perturb_never_replaces_a_key_file_even_with_force(setup, tmp_path):
    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    key = tmp_path / "key.csv"
    write_key_file(Key.generate(), key)
    before = key.read_bytes()
    assert perturb(setup, src, key, "--force") == 5
    assert key.read_bytes() == before


# -- item 11: input edge cases -------------------------------------------------------------------


def test_epsilon_text_is_never_rounded_to_fit():
    for text in ("0." + "9" * 101, "0." + "9" * 31, "1." + "0" * 29 + "1"):
        with pytest.raises(InvalidParameterError, match="at most 30 significant digits"):
            parse_epsilon(text)
    assert parse_epsilon("0." + "9" * 30).text == "0." + "9" * 30
    assert parse_epsilon("1." + "0" * 200).text == "1"  # trailing zeros are not digits of value
    with pytest.raises(InvalidParameterError):
        parse_epsilon("1" * 5000)


def test_numpy_numbers_are_accepted_like_python_ones():
    assert parse_epsilon(np.float64(0.1)) == parse_epsilon(0.1) == Decimal("0.1")
    assert parse_epsilon(np.int64(2)) == 2
    with pytest.raises(InvalidParameterError):
        parse_epsilon(np.bool_(True))


def test_epsilon_times_radius_is_checked_exactly_whatever_the_ambient_context(monkeypatch):
    from postcode_privacy.mechanism import powers

    monkeypatch.setattr(powers, "_powers_cached", lambda e, r: ())  # never reached when refused
    with localcontext() as ctx:
        ctx.prec = 5  # 1.90001 * 10000 = 19000.1 would round to 19000
        with pytest.raises(InvalidParameterError, match="epsilon times radius"):
            powers.powers(Decimal("1.90001"), 10_000)


@pytest.mark.parametrize(
    "text", ["ß1 1AA", "ſW1A 1AA", "sw1a\u00a01aa", "SW1A 1AA\u2003", "ＳＷ1A 1AA", "SW1A 1ĀA"]
)
def test_postcodes_outside_ascii_are_refused_before_case_mapping(text):
    assert try_normalise(text) is None


@pytest.mark.parametrize(
    "text",
    ["SW1A 1AA", "GIR 0AA", "B1 1AY", "W1A 0AX", "AA9A 9AA", "BT1 5GS", "SW1A 1AA\n",
     "SW1A  1AA", " SW1A 1AA", "sw1a 1aa", "SW1A1AA", "SW1A 1AI", "SW1A\u00a01AA", "SW1A 1AÅ",
     "GIR0AA", "NPT 0AD", "", " ", "SW1A 1A", "\nSW1A 1AA", "SW1A\t1AA", "ſW1A 1AA"],
)  # fmt: skip
def test_is_normalised_exactly_when_normalising_changes_nothing(text):
    """The release checks take a cell that is_normalised as its own normal form."""
    assert is_normalised(text) == (try_normalise(text) == text)


def test_is_normalised_agrees_with_try_normalise_on_random_text():
    """Valid postcodes with 0 to 2 random edits (insert, delete, replace) from an alphabet of
    case, space, newline, tab, NBSP, the long s and letters no unit may use."""
    rng = random.Random(11)
    alphabet = "AB9 0CIZa\n\t\u00a0ſ"
    templates = ["SW1A 1AA", "GIR 0AA", "B1 1AY", "EC1A 1BB", "M1 1AE", "CR2 6XH"]
    checked = 0
    for _ in range(20_000):
        text = list(rng.choice(templates))
        for _ in range(rng.randrange(3)):
            at = rng.randrange(len(text) + 1)
            edit = rng.randrange(3)
            if edit == 0:
                text.insert(at, rng.choice(alphabet))
            elif at < len(text):
                if edit == 1:
                    del text[at]
                else:
                    text[at] = rng.choice(alphabet)
        cell = "".join(text)
        assert is_normalised(cell) == (try_normalise(cell) == cell), repr(cell)
        checked += is_normalised(cell)
    assert 2_000 < checked < 19_000  # both answers are well represented


def test_ascii_postcodes_still_normalise():
    assert try_normalise(" sw1a\t1aa ") == "SW1A 1AA"
    assert try_normalise("ss1 1aa") == "SS1 1AA"


def test_a_lone_surrogate_identifier_is_refused_without_quoting_it(setup, tmp_path, capsys):
    with pytest.raises(ValueError) as caught:
        canonical_subject_id("ab\udcffcd")
    assert "\udcff" not in str(caught.value) and "dcff" not in str(caught.value).lower()
    from postcode_privacy import perturb_frame

    df = pd.DataFrame({"subject": ["ok", "x\ud800y"], "postcode": setup["codes"][:2]}, dtype=object)
    with pytest.raises(InputDataError) as caught:
        perturb_frame(df, **python_options(setup))
    text = str(caught.value) + repr(caught.value.row_errors)
    assert "\ud800" not in text and "d800" not in text.lower()
    assert caught.value.row_errors == [
        (2, "identifier is not valid Unicode text (it holds a lone surrogate)")
    ]


def _unassigned_here() -> str:
    """A code point this Python's Unicode database leaves unassigned and that no later version
    may assign (a noncharacter), and, where this Python has Unicode 14.0, U+1E08F, which 15.0
    made a combining mark (NFC then reorders it: the case the rule exists for)."""
    import unicodedata

    return "\U0001e08f" if unicodedata.category("\U0001e08f") == "Cn" else "\ufdd0"


def test_an_identifier_with_an_unassigned_code_point_is_refused_without_quoting_it(setup):
    """NFC of an unassigned code point may change with the Unicode version, so the same
    identifier could be two subjects on two Pythons: refused, on the vectorised route too."""
    from postcode_privacy import perturb_frame

    odd = _unassigned_here()
    for text in (f"x{odd}\u0316", f"x\u0316{odd}", "\ufdd0", "a\U0010fffe"):
        with pytest.raises(ValueError, match="unassigned") as caught:
            canonical_subject_id(text)
        assert text not in str(caught.value)
    assert canonical_subject_id(" Zoe\u0308 ") == "Zoë"  # assigned: composed, as before
    ids = ["José", f"x{odd}\u0316", "李", "x\u0316", "\ufdd0"]  # not ASCII: the bulk route
    df = pd.DataFrame({"subject": ids, "postcode": setup["codes"][:5]}, dtype=object)
    with pytest.raises(InputDataError) as caught:
        perturb_frame(df, **python_options(setup))
    assert [row for row, _ in caught.value.row_errors] == [2, 5]
    assert all("unassigned" in reason for _, reason in caught.value.row_errors)
    text = str(caught.value) + repr(caught.value.row_errors)
    assert odd not in text and "\ufdd0" not in text
    released = perturb_frame(df, **python_options(setup), on_error="null")
    assert released["postcode_dp"].isna().tolist() == [False, True, False, False, True]


def test_ragged_record_after_quoted_newlines_names_record_and_line(setup, tmp_path, capsys):
    src = tmp_path / "in.csv"
    codes = setup["codes"]
    src.write_text(
        f'subject,postcode,visit\n1,{codes[0]},"a\nb\nc"\n2,{codes[1]},x\n3,{codes[2]},y,extra\n'
    )
    assert perturb(setup, src, tmp_path / "out.csv") == 3
    assert "record 3 (starting on line 6 of the file) has 4 fields" in capsys.readouterr().err


# -- issue 13 item 5: messages in the terms of the interface used -------------------------------


def test_messages_name_options_as_the_cli_spells_them(setup, tmp_path, capsys):
    src = tmp_path / "in.csv"
    df = frame(setup["codes"])
    df.loc[3, "postcode"] = "not a postcode"
    df.to_csv(src, index=False)
    assert perturb(setup, src, tmp_path / "out.csv") == 3
    err = capsys.readouterr().err
    assert "with --on-error error nothing is released" in err and "on_error=" not in err
    (tmp_path / "taken.csv").write_text("x")
    assert perturb(setup, src, tmp_path / "taken.csv", "--on-error", "null") == 5
    err = capsys.readouterr().err
    assert "taken.csv already exists; --force replaces it" in err and "force=True" not in err


def test_library_messages_keep_python_names(setup, tmp_path):
    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    (tmp_path / "taken.csv").write_text("x")
    with pytest.raises(OutputExistsError, match="taken.csv already exists; force=True replaces"):
        release_file(src, tmp_path / "taken.csv", **python_options(setup))


def test_report_postcode_that_is_not_a_postcode_says_so(setup, tmp_path, capsys):
    graph = setup["graph_obj"]
    from postcode_privacy.errors import UnknownPostcodeError

    with pytest.raises(UnknownPostcodeError, match="not a UK postcode in form"):
        graph.index_of("not a postcode")
    with pytest.raises(UnknownPostcodeError, match="well-formed but not a node"):
        graph.index_of("SW1A 1AA")
    code = main(
        [
            "report",
            "--epsilon",
            "1",
            "--graph",
            setup["graph"],
            "--postcode",
            "not a postcode",
            "-o",
            str(tmp_path / "r.html"),
            "-q",
        ]
    )
    assert code == 3
    assert "not a UK postcode in form" in capsys.readouterr().err
    assert names(tmp_path) == []


def test_build_never_replaces_a_key_file_even_with_force(tmp_path, capsys):
    fixtures = Path(__file__).parent / "fixtures" / "sources"
    key = tmp_path / "graph.ppgraph"
    write_key_file(Key.generate(), key)
    before = key.read_bytes()
    assert (
        main(
            [
                "build",
                "--codepoint",
                str(fixtures / "codepoint"),
                "-o",
                str(key),
                "--force",
                "--quiet",
            ]
        )
        == 5
    )
    assert "key file; it is never replaced" in capsys.readouterr().err
    assert key.read_bytes() == before


@pytest.mark.parametrize("suffix", ["", ".gz"])
@pytest.mark.parametrize("blank", ["   ", "\t", " \t ", "  \r"])
def test_a_line_of_spaces_or_tabs_is_refused_naming_its_line(
    setup, tmp_path, capsys, blank, suffix
):
    """pandas skips a line of spaces or tabs as if it were empty, so a record would vanish
    without a word.  Such a line is refused, naming its line of the file; the same characters
    inside a quoted cell, and truly empty lines, are as before."""
    codes = setup["codes"]
    lines = ["subject,postcode,visit", f"1,{codes[0]},a", blank, f"2,{codes[1]},b", ""]
    text = "\n".join(lines)
    src = tmp_path / f"in.csv{suffix}"
    src.write_bytes(gzip.compress(text.encode()) if suffix else text.encode())
    assert perturb(setup, src, tmp_path / "out.csv") == 3
    assert "line 3 of the file holds only spaces or tabs" in capsys.readouterr().err
    assert names(tmp_path) == [src.name]
    quoted = "\n".join(
        ["subject,postcode,visit", f'1,{codes[0]},"a', blank, 'b"', "", f"2,{codes[1]},c\n"]
    )
    (tmp_path / "q.csv").write_text(quoted)
    assert perturb(setup, tmp_path / "q.csv", tmp_path / "q_out.csv") == 0
    back = pd.read_csv(tmp_path / "q_out.csv", dtype=str, keep_default_na=False)
    assert back["visit"].tolist() == [f"a\n{blank}\nb", "c"]


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_failing_records_of_a_csv_file_are_listed_with_the_line_they_start_on(
    setup, tmp_path, capsys, suffix
):
    """A record number counts records, not lines: an analyst looking at line 3 for "row 2"
    finds the wrong one (a newcomer's review).  Each listed record also gives the line of the
    file it starts on, past quoted newlines and the empty lines pandas skips."""
    import gzip

    good = setup["codes"][0]
    text = (
        "\ufeffsubject,postcode,visit\r\n"  # line 1, with a byte-order mark
        f"a,{good},v\r\n"  # line 2: record 1
        'b,,"two\r\nlines"\r\n'  # lines 3-4: record 2, no postcode
        "\r\n"  # line 5: empty, skipped
        f"c,{good},v\r\n"  # line 6: record 3
        f",{good},v\r\n"  # line 7: record 4, no identifier
    ).encode()
    src = tmp_path / f"in{suffix}"
    src.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
    assert perturb(setup, src, tmp_path / "out.csv") == 3
    err = capsys.readouterr().err
    assert "  row 2: missing or blank postcode (line 3)\n" in err
    assert "  row 4: blank identifier (line 7)\n" in err
    # Where the two readers would count records differently, no line rather than a wrong one.
    from postcode_privacy.release.csv_lines import record_lines

    assert record_lines(src, [2, 4], total=4) == {2: 3, 4: 7}
    assert record_lines(src, [2, 4], total=5) == {}
    parquet = tmp_path / "in.parquet"
    frame(setup["codes"], n=3).assign(postcode=["", good, good]).to_parquet(parquet)
    assert perturb(setup, parquet, tmp_path / "out2.csv") == 3
    err = capsys.readouterr().err
    assert "  row 1: missing or blank postcode\n" in err and "(line" not in err  # no lines


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_bytes_that_are_not_utf8_are_placed_on_the_line_the_csv_readers_count(
    setup, tmp_path, capsys, end
):
    """A lone CR ends a line for the CSV readers as LF and CRLF do: the not-UTF-8 message
    counts lines the same way (a CR-only file's bad byte on line 3 was put on line 1)."""
    good = setup["codes"][0]
    head = f"\ufeffsubject,postcode{end}a,{good}{end}b,".encode()
    src = tmp_path / "in.csv"
    src.write_bytes(head + b"\xff" + f"{end}c,{good}{end}".encode())
    assert perturb(setup, src, tmp_path / "out.csv") == 3
    assert "first invalid byte on line 3 of the file" in capsys.readouterr().err


def test_no_lines_are_listed_from_a_file_changed_since_its_check(setup, tmp_path, capsys):
    """The lines come from reading the file again: if it changed since it was checked (an
    empty line put in front keeps its records), they could be wrong, so none are shown."""
    from postcode_privacy.release import files

    good = setup["codes"][0]
    src = tmp_path / "in.csv"
    src.write_text(f"subject,postcode,visit\na,{good},v\nb,,v\n", encoding="utf-8")
    real = files.record_lines

    def after_a_change(path, rows, total):
        Path(path).write_text(f"\nsubject,postcode,visit\na,{good},v\nb,,v\n", encoding="utf-8")
        return real(path, rows, total)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(files, "record_lines", after_a_change)
        assert perturb(setup, src, tmp_path / "out.csv") == 3
    err = capsys.readouterr().err
    assert "  row 2: missing or blank postcode\n" in err and "(line" not in err


@pytest.mark.parametrize(
    ("last", "name"),
    [('"abc', "in.csv"), ('"', "in.csv"), ('"abc', "in.csv.gz"), ('"a""b', "in.csv")],
    ids=["cell", "lone-quote", "gzip", "doubled-quote"],
)
def test_an_unclosed_quote_at_the_end_of_the_file_names_its_line(
    setup, tmp_path, capsys, last, name
):
    """With no line break after it, the never-closed cell ends the file: Python's lenient
    reader closes it silently, so the cell read holds no quote, and the line was not named
    (a hostile review)."""
    import gzip

    codes = setup["codes"]
    text = f"subject,postcode,visit\n1,{codes[0]},a\n2,{codes[1]},{last}".encode()
    (tmp_path / name).write_bytes(gzip.compress(text, mtime=0) if name.endswith(".gz") else text)
    assert perturb(setup, tmp_path / name, tmp_path / "out.csv") == 3
    assert (
        "record starting on line 3 of the file has a quoted cell that is never closed"
        in capsys.readouterr().err
    )
    assert names(tmp_path) == [name]


@pytest.mark.parametrize("second", ["a", '12" ruler'], ids=["plain", "after-a-literal-quote"])
def test_an_unclosed_quote_names_the_line_its_record_starts_on(setup, tmp_path, capsys, second):
    """A quote inside an unquoted field is text, as pandas reads it, so it does not throw the
    line count off."""
    codes = setup["codes"]
    text = f'subject,postcode,visit\n1,{codes[0]},{second}\n2,{codes[1]},"b\n3,{codes[2]},c\n'
    (tmp_path / "in.csv").write_text(text)
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "out.csv") == 3
    assert (
        "record starting on line 3 of the file has a quoted cell that is never closed"
        in capsys.readouterr().err
    )
    assert names(tmp_path) == ["in.csv"]


@pytest.mark.parametrize(
    ("row", "line"),
    [
        ('"{id}"1,{pc},v', 3),  # pandas read the identifier as the two pieces joined
        ('1,"{pc_head}"{pc_tail},v', 3),  # and a postcode never written as one
        ('1,{pc},"note"a"b"', 3),
        ('1,{pc},"note" ', 3),  # (a space after the closing quote is text too)
        ('1,{pc},"a\nb"c', 3),  # a quoted line break: the record's first line is named
    ],
)
def test_text_after_a_closing_quote_is_refused_naming_its_line(setup, tmp_path, capsys, row, line):
    """``"SID0000"1`` was read by pandas as ``SID00001`` and released: another identifier,
    perhaps someone else's, or a postcode the file never held.  Python's CSV reader refuses
    it in strict mode; so does the release, naming the line, never the cell."""
    codes = setup["codes"]
    pc = codes[3]
    cells = row.format(id="SID0000", pc=pc, pc_head=pc[:-2], pc_tail=pc[-2:])
    text = f"subject,postcode,visit\n2,{codes[1]},ok\n{cells}\n3,{codes[2]},c\n"
    (tmp_path / "in.csv").write_text(text)
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "out.csv") == 3
    err = capsys.readouterr().err
    assert f"the record starting on line {line} of the file has text after the closing quote" in err
    assert pc not in err and "SID" not in err and "note" not in err
    assert names(tmp_path) == ["in.csv"]


@pytest.mark.parametrize(
    ("header", "line"),
    [('subject,"post"code,visit', 1), ('"subj"x,postcode,visit', 1), ('\n\n"s"x,p,v', 3)],
)
def test_a_quoted_header_name_with_text_after_it_is_refused(setup, tmp_path, capsys, header, line):
    """Whether or not the pieces joined would match the option ("post" "code"), the header is
    named, never a column said missing."""
    codes = setup["codes"]
    (tmp_path / "in.csv").write_text(f"{header}\n1,{codes[0]},v\n")
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "out.csv") == 3
    err = capsys.readouterr().err
    assert f"the header line starting on line {line} of the file has text after the closing" in err
    assert names(tmp_path) == ["in.csv"]


@pytest.mark.parametrize(
    ("cells", "read"),
    [('"a ""b"" c"', 'a "b" c'), ('ab"c', 'ab"c'), ('"x,y"', "x,y"), ('""', "")],
)
def test_quotes_written_as_csv_writes_them_still_round_trip(setup, tmp_path, cells, read):
    codes = setup["codes"]
    (tmp_path / "in.csv").write_text(f"subject,postcode,visit\n1,{codes[0]},{cells}\n")
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "out.csv") == 0
    released = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert released["visit"].tolist() == [read]


def test_a_first_record_longer_than_the_header_is_named_by_its_line(setup, tmp_path, capsys):
    codes = setup["codes"]
    (tmp_path / "in.csv").write_text(f"\n\nsubject,postcode,visit\n1,{codes[0]},v,extra\n")
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "out.csv") == 3
    assert "record 1 (starting on line 4 of the file) has 4 fields" in capsys.readouterr().err


@pytest.mark.slow  # over 2 s (CONTRIBUTING.md, "Running the tests")
def test_a_header_name_past_the_csv_modules_default_limit_is_read(setup, tmp_path):
    """Python's CSV reader stops at 131,072 characters a field by default; the header may hold
    up to 1,000,000 characters, so one long column name is read, and released unchanged."""
    codes = setup["codes"]
    long_name = "x" * 200_000
    (tmp_path / "in.csv").write_text(f"subject,postcode,{long_name}\n1,{codes[0]},a\n")
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "out.csv") == 0
    assert pd.read_csv(tmp_path / "out.csv", dtype=str).columns[1] == long_name


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("subject,postcode,visit\r1,{0},a\r   \r2,{1},b\r", 3),  # CR-only line endings
        ('subject,postcode,visit\n1,{0},12" ruler\n   \n2,{1},b\n', 3),  # a literal quote
        ("\ufeff \t \nsubject,postcode,visit\n1,{0},a\n", 1),  # before the header, after a BOM
        ('subject,postcode,visit\n1,{0},12" ruler\n2,{1},"multi\n   \nline"\n', None),
        ("subject,postcode,visit\n  1,{0},a\n\t2,{1},b\n", None),  # records that start blank
    ],
    ids=["cr-only", "literal-quote", "before-header", "quoted-after-literal", "leading-blanks"],
)
def test_blank_lines_are_found_as_pandas_splits_lines_and_quotes(
    setup, tmp_path, capsys, text, line
):
    """The search follows Python's CSV reader, which splits lines and quotes as pandas does: a
    quote inside an unquoted field is text, and LF, CR and CRLF all end a line."""
    codes = setup["codes"]
    (tmp_path / "in.csv").write_text(text.format(codes[0], codes[1]), newline="")
    code = perturb(setup, tmp_path / "in.csv", tmp_path / "out.csv")
    err = capsys.readouterr().err
    if line is None:
        assert code == 0, err
    else:
        assert code == 3 and f"line {line} of the file holds only spaces or tabs" in err
        assert names(tmp_path) == ["in.csv"]


@pytest.mark.parametrize("offset", [262_140, 262_142, 262_143, 262_146])
def test_leading_spaces_at_the_readers_buffer_edge_are_kept(setup, tmp_path, offset):
    """pandas' reader, while it looks for blank lines, loses the spaces a record starts with
    when they straddle the end of its 256 KiB buffer; where a line starts with a space or tab
    the file is read without that search, and every cell comes out as it went in."""
    codes = setup["codes"]
    header = "subject,postcode,visit\n"
    first = f"1,{codes[0]},"
    filler = "z" * (offset - len(header) - len(first) - 1)
    text = header + first + filler + "\n" + f"    x,{codes[1]},b\n" + f"3,{codes[2]},c\n"
    assert text.index("    x") == offset
    (tmp_path / "in.csv").write_text(text)
    assert perturb(setup, tmp_path / "in.csv", tmp_path / "out.csv") == 0
    limit = csv.field_size_limit(10**7)  # the filler cell is longer than its default
    try:
        with open(tmp_path / "out.csv", newline="") as handle:
            back = list(csv.reader(handle))
    finally:
        csv.field_size_limit(limit)
    assert [row[0] for row in back] == ["subject", "1", "    x", "3"]
    assert back[1][1] == filler


def test_empty_lines_are_skipped_only_where_pandas_skips_them_safely(setup, tmp_path, capsys):
    """pandas' blank-line search loses the blanks a record starts with at its 256 KiB buffer's
    end, and after an empty line ended by a lone CR drops the next record's leading comma.
    Empty lines are skipped where neither can strike, and refused, naming the first, where
    one could; a file without empty lines is read without the search at all."""
    codes = setup["codes"]

    def release(name, text):
        (tmp_path / name).write_text(text, newline="")
        code = perturb(setup, tmp_path / name, tmp_path / f"out-{name}")
        return code, capsys.readouterr().err

    small = f"subject,postcode,visit\n  1,{codes[0]},a\n\n2,{codes[1]},b\n\n"
    assert release("small.csv", small)[0] == 0  # below the buffer: skipped safely
    with open(tmp_path / "out-small.csv", newline="") as handle:
        assert [row[0] for row in csv.reader(handle)] == ["subject", "  1", "2"]
    filler = "z" * 300_000
    large = f"subject,postcode,visit\n1,{codes[0]},{filler}\n  2,{codes[1]},b\n\n3,{codes[2]},c\n"
    code, err = release("large.csv", large)
    assert code == 3 and "line 4 of the file is empty" in err and "spaces or tabs" in err
    shifted = f"visit,subject,postcode\ra,1,{codes[0]}\r\r,2,{codes[1]}\rc,3,{codes[2]}\r"
    code, err = release("cr.csv", shifted)
    assert code == 3 and "line 3 of the file is empty" in err and "lone CR" in err
    trailing = f"visit,subject,postcode\ra,1,{codes[0]}\r,2,{codes[1]}\r\r"
    assert release("cr-trailing.csv", trailing)[0] == 0  # no record after the empty line
    with open(tmp_path / "out-cr-trailing.csv", newline="") as handle:
        assert [row[:2] for row in csv.reader(handle)] == [
            ["visit", "subject"],
            ["a", "1"],
            ["", "2"],
        ]
    # A CR inside a quoted cell ends no line: an LF file holding one, with an empty line, was
    # refused as if its lines ended in lone CRs (a hostile review of round 28).
    quoted = f'subject,postcode,visit\n1,{codes[0]},"a\rb"\n\n2,{codes[1]},c\n'
    assert release("quoted-cr.csv", quoted)[0] == 0
    with open(tmp_path / "out-quoted-cr.csv", newline="") as handle:
        assert [(row[0], row[1]) for row in csv.reader(handle)] == [
            ("subject", "visit"),
            ("1", "a\rb"),
            ("2", "c"),
        ]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out-")) == [
        f"out-{n}{s}"
        for n in ("cr-trailing.csv", "quoted-cr.csv", "small.csv")
        for s in ("", ".audit.json", ".manifest.json")
    ]


def test_the_empty_line_refusal_covers_every_file_pandas_would_misread(tmp_path):
    """The rule that refuses empty lines where pandas' blank-line search could drop a leading
    comma (an empty line ended by a lone CR, outside quotes, before a record), checked against
    pandas itself on 2,000 random small files of mixed line ends, quoted CRs and leading
    commas: wherever pandas reads other records than Python's CSV reader, the rule refuses."""
    import io
    import random

    from postcode_privacy.release.csv_lines import blank_and_empty_lines

    rng = random.Random(5)
    faults = 0
    for _ in range(2000):
        lines = ["a,b"] + [
            rng.choice(["", "", ",x", '"p\rq",y', "1,z", "2,y"]) for _ in range(rng.randint(1, 6))
        ]
        ends = [rng.choice(["\r", "\n", "\r\n"]) for _ in lines]
        text = "".join(line + end for line, end in zip(lines, ends))
        expected = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, index_col=False)
        if [list(frame.columns), *frame.to_numpy().tolist()] != expected:
            faults += 1
            path = tmp_path / "fault.csv"
            path.write_text(text, newline="")
            assert blank_and_empty_lines(str(path)).cr_empty_before_record, repr(text)
    assert faults > 40  # (the files do strike pandas' fault)


def test_a_dropped_record_leaves_no_value_in_the_release_dictionaries(setup, tmp_path):
    """Under --on-error drop a dropped record's cells must appear nowhere in the release: not in
    a Parquet dictionary (Arrow wrote the input's whole dictionary) nor in a categorical's
    categories (``perturb_frame``).  Found by a hostile review."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from postcode_privacy import perturb_frame

    people = frame(setup["codes"], n=6)
    people.loc[3, "postcode"] = "BT1 1AA"  # not in the graph: dropped
    people.loc[3, "visit"] = "ZZ-DROPPED-VISIT"
    table = pa.Table.from_pandas(people, preserve_index=False)
    table = table.set_column(2, "visit", pa.compute.dictionary_encode(table.column("visit")))
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(table, src)
    assert perturb(setup, src, out, "--on-error", "drop") == 0
    released = pq.read_table(out)
    assert pa.types.is_dictionary(released.schema.field("visit").type)  # still a dictionary
    assert released.column("visit").to_pylist() == [
        v for i, v in enumerate(people["visit"]) if i != 3
    ]
    assert b"ZZ-DROPPED-VISIT" not in out.read_bytes()
    categorical = people.astype({"visit": "category"})
    result = perturb_frame(categorical, **python_options(setup, on_error="drop"))
    assert "ZZ-DROPPED-VISIT" not in list(result["visit"].cat.categories)
    assert list(result["visit"]) == [v for i, v in enumerate(people["visit"]) if i != 3]
    # The same frame read with dtype_backend="pyarrow": an Arrow dictionary column.
    arrow = pd.read_parquet(src, dtype_backend="pyarrow")
    result = perturb_frame(arrow, **python_options(setup, on_error="drop"))
    kept = pa.array(result["visit"].array)
    assert pa.types.is_dictionary(kept.type)
    assert "ZZ-DROPPED-VISIT" not in kept.dictionary.to_pylist()
    assert list(result["visit"]) == [v for i, v in enumerate(people["visit"]) if i != 3]
    written = tmp_path / "frame.parquet"
    result.to_parquet(written)
    assert b"ZZ-DROPPED-VISIT" not in written.read_bytes()


def test_int96_timestamps_far_from_today_survive_and_bad_values_are_named_by_type(
    setup, tmp_path, capsys
):
    """Spark's INT96 timestamps are read in microseconds, so 9999-12-31 (a common "valid to")
    comes back as itself instead of wrapping round to 1816; and a value invalid for a column
    that is not text is not called bad UTF-8.  Both found by a hostile review."""
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    people = frame(setup["codes"], n=3)
    when = [dt.datetime(9999, 12, 31), dt.datetime(1, 1, 1), dt.datetime(2024, 5, 1, 12, 0, 0, 7)]
    table = pa.Table.from_pandas(people, preserve_index=False).append_column(
        "valid_to", pa.array(when, pa.timestamp("us"))
    )
    src, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(table, src, use_deprecated_int96_timestamps=True, store_schema=False)
    assert perturb(setup, src, out) == 0
    assert pq.read_table(out).column("valid_to").to_pylist() == when
    bad = pa.Array.from_buffers(pa.time32("s"), 3, pa.array([5, 100_000, 7], pa.int32()).buffers())
    pq.write_table(pa.Table.from_pandas(people, preserve_index=False).append_column("t", bad), src)
    assert perturb(setup, src, tmp_path / "other.parquet") == 3
    err = capsys.readouterr().err
    assert "record 2, column 4 holds a value that is not valid for its type (times of day)" in err
    assert "UTF-8" not in err


def test_a_parquet_value_csv_cannot_show_is_a_clear_error_not_a_traceback(setup, tmp_path, capsys):
    """A date32 past year 9999 cannot become CSV text: exit code 3 naming the record and the
    column (never the value); a time zone Python does not know is refused before any work,
    naming the column, exit code 8.  No output, no traceback; Parquet output keeps both."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    people = pa.Table.from_pandas(frame(setup["codes"], n=2), preserve_index=False)
    for name, values, code, message in [
        (
            "far",
            pa.array([0, 10**7], pa.date32()),
            3,
            "record 2, column 4 holds a date outside years 1 to 9999, which CSV output cannot show",
        ),
        (
            "zone",
            pa.array([0, 1], pa.timestamp("s", tz="Invalid/Zone")),
            8,
            "column 4 holds timestamps in a time zone Python does not know, which a CSV cell",
        ),
    ]:
        src, out = tmp_path / f"{name}.parquet", tmp_path / f"{name}.csv"
        pq.write_table(people.append_column("when", values), src)
        assert perturb(setup, src, out) == code
        err = capsys.readouterr().err
        assert message in err
        assert "Traceback" not in err and not out.exists()
        assert perturb(setup, src, tmp_path / f"{name}-out.parquet") == 0  # Parquet keeps it


def test_a_column_csv_cannot_hold_is_described_in_plain_words_never_by_its_arrow_type(
    setup, tmp_path, capsys
):
    """pyarrow's text of a type is jargon and can carry the input's own names (a map read from
    Parquet names its entries after the column; a struct lists its fields): the refusal names
    the column by position and its kind in plain words.  Found by a hostile review, which
    saw a map column's header name quoted in the message."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    people = pa.Table.from_pandas(frame(setup["codes"], n=2), preserve_index=False)
    secret = "SECRETNAME123"
    for values, words in [
        (
            pa.array([[("k", [1])], [("k", [2])]], pa.map_(pa.string(), pa.list_(pa.int64()))),
            "maps",
        ),
        (pa.array([{secret: 1}, {secret: 2}], pa.struct([(secret, pa.int8())])), "structs"),
        (pa.array([[1], [2]], pa.list_(pa.field(secret, pa.int8()))), "lists"),
        (pa.array([b"a", b"b"], pa.binary()), "binary values"),
        (pa.array([b"a", b"b"]).dictionary_encode(), "dictionary-encoded binary values"),
        (pa.array([0, 1], pa.timestamp("s", tz=secret)), "timestamps in a time zone Python"),
    ]:
        src, out = tmp_path / "in.parquet", tmp_path / "out.csv"
        pq.write_table(people.append_column(secret, values), src)
        assert perturb(setup, src, out) == 8
        err = capsys.readouterr().err
        assert f"column 4 holds {words}" in err
        assert secret not in err and "<" not in err and not out.exists()


def test_type_words_name_every_arrow_type_without_its_text():
    import pyarrow as pa

    from postcode_privacy.release.type_words import type_words

    secret = "SECRETNAME123"
    kinds = [
        pa.null(), pa.bool_(), pa.int8(), pa.uint64(), pa.float16(), pa.float64(),
        pa.decimal128(5, 2), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
        pa.binary(4), pa.date32(), pa.date64(), pa.timestamp("ns", tz=secret), pa.time64("us"),
        pa.duration("s"), pa.month_day_nano_interval(), pa.map_(pa.string(), pa.int8()),
        pa.list_(pa.field(secret, pa.int8())), pa.large_list(pa.int8()), pa.list_(pa.int8(), 2),
        pa.struct([(secret, pa.int8())]), pa.dense_union([pa.field(secret, pa.int8())]),
        pa.dictionary(pa.int8(), pa.string()), pa.run_end_encoded(pa.int32(), pa.binary()),
    ]  # fmt: skip
    if hasattr(pa, "uuid"):
        kinds.append(pa.uuid())
    if hasattr(pa, "list_view"):
        kinds += [pa.list_view(pa.int8()), pa.string_view(), pa.binary_view()]
    for kind in kinds:
        words = type_words(kind)
        assert secret not in words and "<" not in words and "[" not in words
        assert words != "values of an unusual type", kind
    assert type_words(pa.map_(pa.string(), pa.int8())) == "maps"  # not "lists", as stored
    assert type_words(pa.dictionary(pa.int8(), pa.string())) == "dictionary-encoded text"


def test_a_dictionary_the_release_cannot_rewrite_is_named_by_its_input_column(
    setup, tmp_path, capsys
):
    """Two input row groups of 100 values each, under an int8 dictionary: one output row
    group cannot hold both.  The message names column 4, where the user sees it in the
    input, not 3, its place in the output once the true postcode is dropped."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    codes, n = setup["codes"], 200
    small = pa.dictionary(pa.int8(), pa.string())
    notes = [
        pa.array([f"v{i}" for i in range(k * 100, k * 100 + 100)]).dictionary_encode().cast(small)
        for k in range(2)
    ]
    table = pa.Table.from_pandas(frame(codes, n=n), preserve_index=False)
    table = table.append_column("notes", pa.chunked_array(notes))
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=100)
    assert perturb(setup, tmp_path / "in.parquet", tmp_path / "out.parquet") == 3
    err = capsys.readouterr().err
    assert "column 4 is dictionary-encoded in a way this release cannot rewrite" in err
    assert "v1" not in err and "Traceback" not in err
    assert names(tmp_path) == ["in.parquet"]


@pytest.mark.slow  # over 2 s (CONTRIBUTING.md, "Running the tests")
def test_dictionaries_nested_or_ordered_are_rewritten_from_the_rows_alone(setup, tmp_path):
    """A review of the fix above: a dictionary inside a struct or a list leaked the dropped
    value too; an ordered dictionary lost its order; and a flush spanning two row groups
    made the bytes depend on the chunk size.  Now every dictionary is rewritten row group by
    row group, an ordered one in the input's order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from postcode_privacy.release import release_file

    n = 140_000  # past two row groups of 65,536
    codes = setup["codes"]
    people = frame(codes, n=n)
    people.loc[3, "postcode"] = "BT1 1AA"  # dropped
    level = pa.dictionary(pa.int8(), pa.string(), ordered=True)
    grades = ["low", "mid", "high"]
    notes = pa.array(["ok"] * n).dictionary_encode()
    notes = pa.DictionaryArray.from_arrays(
        notes.indices, ["ok", "SECRET"]
    )  # an entry no released row uses
    table = pa.Table.from_pandas(people, preserve_index=False)
    table = table.append_column("st", pa.StructArray.from_arrays([notes], names=["n"]))
    table = table.append_column(
        "li", pa.ListArray.from_arrays(pa.array(range(n + 1), pa.int32()), notes)
    )
    table = table.append_column(
        "grade",
        pa.DictionaryArray.from_arrays(
            pa.array([2 if i % 3 else 0 for i in range(n)], pa.int8()), grades
        ).cast(level),
    )
    src = tmp_path / "in.parquet"
    pq.write_table(table, src)
    outputs = []
    for chunk in (50_000, 100_000):
        out = tmp_path / f"out{chunk}.parquet"
        release_file(src, out, **python_options(setup, on_error="drop", chunk_size=chunk))
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1]
    assert b"SECRET" not in outputs[0]
    released = pq.read_table(tmp_path / "out50000.parquet")
    assert released.num_rows == n - 1
    grade = released.column("grade").chunk(0)
    assert grade.type.ordered and grade.dictionary.to_pylist() == ["low", "high"]
    assert released.column("grade").to_pylist() == [
        grades[2 if i % 3 else 0] for i in range(n) if i != 3
    ]


def test_perturb_frame_prunes_dropped_categories_whatever_the_index_or_chunks(setup):
    from postcode_privacy import perturb_frame

    n = 10_005  # two chunks of perturb_frame's progress bar
    notes = ["SECRET" if i == 1 else "ok" for i in range(n)]
    people = frame(setup["codes"], n=n).assign(note=pd.Categorical(notes))
    people.loc[1, "postcode"] = "BT1 1AA"  # dropped
    people.index = [i // 2 for i in range(n)]  # labels shared with kept rows
    common = python_options(setup, on_error="drop")
    result = perturb_frame(people, **common)
    assert list(result["note"].cat.categories) == ["ok"]
    assert perturb_frame(people, progress=True, **common)["note"].dtype == result["note"].dtype


def test_after_the_first_stop_signal_the_next_ones_are_ignored_until_main_returns(
    setup, monkeypatch, capsys
):
    """In-process, ``main`` handles SIGINT and SIGTERM by stopping once and ignoring what
    follows at once (so a burst of Ctrl-C cannot cut the clean-up short), then puts Python's
    own handlers back."""
    import signal

    import postcode_privacy.commands.perturb as command
    from postcode_privacy._interrupts import stop_once

    handlers, cut_short = [], []

    def interrupted_again_and_again(*a, **k):
        handlers.append((signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))
        try:
            signal.raise_signal(signal.SIGINT)
        finally:
            try:
                signal.raise_signal(signal.SIGINT)  # during the clean-up: the same stop
                if handlers[0][1] is stop_once:
                    signal.raise_signal(signal.SIGTERM)  # so is this
            except KeyboardInterrupt:
                cut_short.append(True)

    monkeypatch.setattr(command, "resolve_key", interrupted_again_and_again)
    before = signal.getsignal(signal.SIGTERM)
    args = ["perturb", "x.csv", "-o", "y.csv", "--epsilon", "1"]
    assert main([*args, "--id-column", "a", "--postcode-column", "b"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert handlers[0][0] is stop_once and cut_short == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stop_python_dropped_does_not_leave_a_run_no_signal_can_stop(setup, monkeypatch, capsys):
    """Python drops a KeyboardInterrupt raised while a finaliser runs.  The run then goes on,
    so a stop signal after the grace period must stop it: it is not ignored for ever."""
    import signal
    import time

    import postcode_privacy._interrupts as interrupts
    import postcode_privacy.commands.perturb as command

    monkeypatch.setattr(interrupts, "STOP_GRACE", 0.05)
    went_on = []

    def stop_lost_then_sent_again(*a, **k):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # as Python does with one raised inside __del__
        time.sleep(0.2)
        signal.raise_signal(signal.SIGINT)
        went_on.append(True)

    monkeypatch.setattr(command, "resolve_key", stop_lost_then_sent_again)
    args = ["perturb", "x.csv", "-o", "y.csv", "--epsilon", "1"]
    assert main([*args, "--id-column", "a", "--postcode-column", "b"]) == 130
    assert "interrupted" in capsys.readouterr().err and went_on == []


def test_sigterm_stops_every_command_as_ctrl_c_does(tmp_path, monkeypatch, capsys):
    """Not only ``perturb``: ``keygen`` (as every command) turns SIGTERM into a clean stop,
    exit code 130 and nothing written, where it used to die at once."""
    import signal

    import postcode_privacy.keyfile as keyfile

    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        missing_from_this_machine("this test process already handles SIGTERM")

    def terminated(*a, **k):
        signal.raise_signal(signal.SIGTERM)

    monkeypatch.setattr(keyfile, "write_key_file", terminated)
    assert main(["keygen", "-o", str(tmp_path / "k.key")]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.slow  # two command-line processes
def test_a_parquet_column_of_an_extension_type_stored_as_a_dictionary_is_refused(setup, tmp_path):
    """pyarrow aborts the process reading such a column (a failed C++ check, exit 134), which
    left the run's temporary and lock files behind: it is refused by position before any row
    is read, whatever --on-error says."""
    if not hasattr(pa, "opaque"):
        missing_from_this_machine("this pyarrow has no opaque extension type")
    words = pa.dictionary(pa.int8(), pa.string())
    table = pa.Table.from_pandas(frame(setup["codes"], n=3), preserve_index=False)
    stored = pa.array(["x", "SECRET", "z"], words)
    opaque = pa.ExtensionArray.from_storage(pa.opaque(words, "t", "v"), stored)
    for i, values in enumerate([opaque, pa.StructArray.from_arrays([opaque], ["inner"])]):
        src, out = tmp_path / f"in{i}.parquet", tmp_path / f"out{i}.parquet"
        pq.write_table(table.append_column("note", values), src)
        run = spawn(setup, src, out, "--on-error", "null", stderr=subprocess.PIPE, text=True)
        _, err = run.communicate(timeout=120)
        assert run.returncode == 3, err
        assert "column 4 has an Arrow extension type stored dictionary-encoded" in err
        assert "SECRET" not in err and names(tmp_path) == sorted(
            [f"in{j}.parquet" for j in range(i + 1)]
        )


def test_a_stop_python_dropped_in_a_callback_still_stops_the_release(setup, tmp_path, monkeypatch):
    """A stop whose handler ran inside a callback (a weakref's, here) was printed as
    "Exception ignored" and dropped: the release ran on, wrote its files and recorded them
    (a hostile review of round 28, once in about 135 stopped runs).  The release asks before
    each chunk and before its final renames, and stops there with nothing written."""
    import weakref

    from postcode_privacy._interrupts import first_stop_signal_only, stop_once

    class Holder:
        pass

    src = tmp_path / "in.csv"
    frame(setup["codes"]).to_csv(src, index=False)
    dropped = []  # what Python would print as "Exception ignored"
    monkeypatch.setattr(sys, "unraisablehook", dropped.append)
    with first_stop_signal_only(restore=True):
        holder = Holder()
        watch = weakref.ref(holder, lambda _: stop_once(signal.SIGINT, None))
        del holder  # the callback's KeyboardInterrupt is dropped, and no longer printed
        assert watch() is None and dropped == []
        with pytest.raises(KeyboardInterrupt):
            release_file(src, tmp_path / "out.csv", **python_options(setup))
    assert names(tmp_path) == ["in.csv"]
    release_file(src, tmp_path / "out.csv", **python_options(setup))  # (a later run is not)
