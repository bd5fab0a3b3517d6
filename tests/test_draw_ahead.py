"""Drawing a whole file in one engine batch (release/draw_ahead.py).

Under ``on_error="error"`` without a ledger, the check pass keeps each accepted record's
identifier and node and the whole file is drawn in one batch before the writing pass.  The
release must be byte for byte the chunk-by-chunk one, whatever the chunk size, the workers,
the format and the limits; past the limits the release goes chunk by chunk; an input that
changes, a failing record or an interruption leaves nothing behind.
"""

from __future__ import annotations

import multiprocessing
import random

import numpy as np
import pandas as pd
import pytest
from test_release_overlap import KEY, grid, records, release  # noqa: F401 (grid: a fixture)

from postcode_privacy.engine import batch as engine_batch
from postcode_privacy.errors import InputDataError
from postcode_privacy.release import draw_ahead
from postcode_privacy.release.draw_ahead import CompactIds


def no_children_left():
    assert multiprocessing.active_children() == []
    assert not engine_batch._PARALLEL_LOCK.locked()


def test_compact_ids_give_back_every_identifier():
    rng = random.Random(3)
    parts = [
        ["a", "", "Zoë", "\u212b" * 3, "x" * 300],
        [],
        [str(rng.randrange(10**12)) for _ in range(50)],
        ["last"],
    ]
    ids = CompactIds()
    for part in parts:
        ids.append(part)
    flat = [i for part in parts for i in part]
    assert len(ids) == len(flat)
    assert list(ids) == flat
    assert [ids[k] for k in range(len(flat))] == flat
    assert ids[-1] == "last" and ids[1:4] == flat[1:4]
    order = np.array(rng.sample(range(len(flat)), len(flat)))
    assert ids.decode_at(order) == [flat[k] for k in order.tolist()]
    with pytest.raises(IndexError):
        ids[len(flat)]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_file_drawn_ahead_is_the_chunk_by_chunk_release(
    grid,  # noqa: F811
    tmp_path,
    monkeypatch,
    count_calls,
    fmt,
):
    """One engine batch for the whole file (one fork of the workers), and the very bytes of
    the release drawn chunk by chunk, for several chunk sizes, one or two workers; past the
    record or identifier limits the release is drawn chunk by chunk, again the same bytes."""
    graph, codes = grid
    df = records(codes, 7000)
    src = tmp_path / f"in.{fmt}"
    if fmt == "csv":
        df.to_csv(src, index=False)
    else:
        df.to_parquet(src, index=False)
    draws = count_calls(draw_ahead.DrawAhead, "draw")
    forks = count_calls(engine_batch.Draws, "_start_workers")
    batches = count_calls(engine_batch.Draws, "result")
    outputs = {}
    for workers, chunk in [("2", 1500), ("1", 2500), ("2", 10_000)]:
        monkeypatch.setenv("POSTCODE_PRIVACY_WORKERS", workers)
        draws.clear(), forks.clear(), batches.clear()
        out = tmp_path / f"ahead-{workers}-{chunk}.{fmt}"
        release(src, out, graph, chunk_size=chunk)
        # one engine batch either way; a file of one chunk is that batch already
        assert len(draws) == (1 if chunk < len(df) else 0)
        assert len(batches) == 1 and len(forks) == (1 if workers == "2" else 0)
        outputs[out.name] = out.read_bytes()
        no_children_left()
    monkeypatch.setenv("POSTCODE_PRIVACY_WORKERS", "2")
    for limit, value in (("MAX_RECORDS", 3000), ("MAX_ID_BYTES", 20_000)):
        with monkeypatch.context() as patch:
            patch.setattr(draw_ahead, limit, value)  # passed in the second or third chunk
            draws.clear(), batches.clear()
            out = tmp_path / f"chunks-{limit}.{fmt}"
            release(src, out, graph, chunk_size=1500)
            assert draws == [] and len(batches) == 5  # chunk by chunk: five batches
            outputs[out.name] = out.read_bytes()
            no_children_left()
    assert len(set(outputs.values())) == 1, sorted(outputs)
    released = (
        pd.read_csv(tmp_path / f"ahead-2-1500.{fmt}", dtype=str)
        if fmt == "csv"
        else pd.read_parquet(tmp_path / f"ahead-2-1500.{fmt}")
    )
    assert released["person"].tolist() == df["person"].tolist()
    assert released["note"].tolist() == df["note"].tolist()


def test_a_failing_record_means_no_draw_and_no_output(
    grid,  # noqa: F811
    tmp_path,
    count_calls,
):
    graph, codes = grid
    src = tmp_path / "in.csv"
    records(codes, 3000, bad=True).to_csv(src, index=False)
    draws = count_calls(draw_ahead.DrawAhead, "draw")
    with pytest.raises(InputDataError, match="record"):
        release(src, tmp_path / "out.csv", graph, chunk_size=1000)
    assert draws == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_an_input_changed_while_drawn_is_refused(grid, tmp_path, monkeypatch):  # noqa: F811
    """Rows appended while the batch is drawn: the writing pass finds a chunk the check pass
    did not see, and the release fails with nothing written."""
    graph, codes = grid
    src = tmp_path / "in.csv"
    records(codes, 3000).to_csv(src, index=False)
    original = draw_ahead.DrawAhead.draw

    def draw_then_append(self, *args):
        original(self, *args)
        with open(src, "a") as handle:
            handle.write("s999999,LS1 1AA,late\n")

    monkeypatch.setattr(draw_ahead.DrawAhead, "draw", draw_then_append)
    with pytest.raises(InputDataError, match="changed"):
        release(src, tmp_path / "out.csv", graph, chunk_size=1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_an_input_shortened_while_drawn_is_refused(grid, tmp_path, monkeypatch):  # noqa: F811
    """The last chunk removed while the batch is drawn: every chunk written matches, but one
    drawn was never written, and the release fails with nothing written."""
    graph, codes = grid
    src = tmp_path / "in.csv"
    records(codes, 3000).to_csv(src, index=False)
    original = draw_ahead.DrawAhead.draw
    finished = []

    def draw_then_shorten(self, *args):
        original(self, *args)
        records(codes, 2000).to_csv(src, index=False)  # two of the three chunks

    real_finish = draw_ahead.DrawAhead.finish

    def spy_finish(self):
        finished.append(1)
        return real_finish(self)

    monkeypatch.setattr(draw_ahead.DrawAhead, "draw", draw_then_shorten)
    monkeypatch.setattr(draw_ahead.DrawAhead, "finish", spy_finish)
    with pytest.raises(InputDataError, match="changed"):
        release(src, tmp_path / "out.csv", graph, chunk_size=1000)
    assert finished == [1]  # refused there, before the input's hash is compared
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_an_interruption_while_the_file_is_drawn_leaves_nothing(
    grid,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """Ctrl-C while the workers draw the whole file: they are stopped, the lock is free,
    nothing is written, and the next release runs normally."""
    graph, codes = grid
    monkeypatch.setenv("POSTCODE_PRIVACY_WORKERS", "2")
    src = tmp_path / "in.csv"
    records(codes, 6000).to_csv(src, index=False)
    original = engine_batch.Draws._take
    taken = []

    def interrupt_after_a_task(self, start, result):
        original(self, start, result)
        taken.append(engine_batch._PARALLEL_LOCK.locked())
        if len(taken) == 2:  # the first worker task is back: the workers are drawing
            raise KeyboardInterrupt

    monkeypatch.setattr(engine_batch.Draws, "_take", interrupt_after_a_task)
    with pytest.raises(KeyboardInterrupt):
        release(src, tmp_path / "out.csv", graph, chunk_size=2000)
    assert taken == [False, True]  # the first task runs in this process, the next in a worker
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    no_children_left()
    monkeypatch.setattr(engine_batch.Draws, "_take", original)
    release(src, tmp_path / "out.csv", graph, chunk_size=2000)
    assert (tmp_path / "out.csv").exists()


def test_subjects_seen_twice_are_counted_once_drawn_ahead_or_not(
    grid,  # noqa: F811
    tmp_path,
    monkeypatch,
    count_calls,
):
    """The check pass notes the subjects when the file is drawn ahead (the writing pass does
    not check again): the warning and the audit's count are those of the chunk-by-chunk
    release, also when the limits are passed after some chunks were noted."""
    import json
    import warnings

    from postcode_privacy.errors import DuplicateSubjectWarning

    graph, codes = grid
    df = records(codes, 3000)
    for row, earlier in ((1200, 10), (2500, 1300), (2999, 2998)):  # across and within chunks
        df.loc[row, "person"] = df.loc[earlier, "person"]
        df.loc[row, "pc"] = next(c for c in codes if c != df.loc[earlier, "pc"])
    df.loc[2000, "person"] = df.loc[20, "person"]  # the same subject and postcode: no conflict
    df.loc[2000, "pc"] = df.loc[20, "pc"]
    src = tmp_path / "in.csv"
    df.to_csv(src, index=False)
    draws = count_calls(draw_ahead.DrawAhead, "draw")
    seen = {}
    for name, limit in (("ahead", None), ("passed", 1500), ("null", None)):
        with monkeypatch.context() as patch, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if limit is not None:
                patch.setattr(draw_ahead, "MAX_RECORDS", limit)
            out = tmp_path / f"{name}.csv"
            release(
                src, out, graph, chunk_size=1000, on_error="error" if name != "null" else "null"
            )
        audit = json.loads((tmp_path / f"{name}.csv.audit.json").read_text())
        messages = [str(w.message) for w in caught if w.category is DuplicateSubjectWarning]
        seen[name] = (audit["counts"]["identifiers_with_several_postcodes"], messages)
    assert len(draws) == 1  # only the first release was drawn ahead
    assert seen["ahead"] == seen["passed"] == seen["null"]
    count, messages = seen["ahead"]
    assert count == 3 and len(messages) == 1
    assert "record(s) 1201, 2501, 3000" in messages[0]


@pytest.mark.parametrize("change", ["failing records", "a note", "rows swapped"])
def test_an_input_changed_and_changed_back_is_refused(
    grid,  # noqa: F811
    tmp_path,
    monkeypatch,
    change,
):
    """The input replaced after the draw and put back before its hash is taken again: the
    hashes before and after agree, but the writing pass reads chunks other than those checked
    and drawn, and the release fails with nothing written (found by a hostile review)."""
    import os

    from postcode_privacy.release import files

    graph, codes = grid
    src = tmp_path / "in.csv"
    a = records(codes, 3000)
    b = a.copy()
    if change == "failing records":
        b.loc[1500, "pc"], b.loc[1600, "person"] = "not a postcode", ""
    elif change == "a note":
        b.loc[2999, "note"] = "changed"
    else:
        b.iloc[[1200, 1201]] = b.iloc[[1201, 1200]].to_numpy()

    def put(df):
        df.to_csv(f"{src}.tmp", index=False)
        os.replace(f"{src}.tmp", src)

    put(a)
    original_draw, original_hash = draw_ahead.DrawAhead.draw, files.sha256_of_file
    hashed = []

    def draw_then_replace(self, *args):
        original_draw(self, *args)
        put(b)

    def hash_after_putting_back(path):
        hashed.append(path)
        if len(hashed) == 2:  # the input's second hash, at the end
            put(a)
        return original_hash(path)

    monkeypatch.setattr(draw_ahead.DrawAhead, "draw", draw_then_replace)
    monkeypatch.setattr(files, "sha256_of_file", hash_after_putting_back)
    with pytest.raises(InputDataError, match="changed"):
        release(src, tmp_path / "out.csv", graph, chunk_size=1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    assert len(hashed) == 1  # refused in the writing pass, before the second hash


@pytest.mark.slow  # long text in many pieces: over a second and a half
def test_the_chunk_digest_takes_the_arrow_route_for_text_read_in_pieces(tmp_path):
    """pandas holds a long chunk's text in several Arrow pieces: the digest still hashes its
    Arrow bytes (not the slow fallback), the same for the same cells however they are split,
    and different for a changed cell."""
    import pyarrow as pa

    from postcode_privacy.release.reader import TableReader

    n, rows = 100_000, 120_000  # a chunk of a longer file, as a release reads it
    src = tmp_path / "long.csv"
    notes = {f"note{j}": [f"text {i * j}" for i in range(rows)] for j in range(8)}  # wide
    pd.DataFrame({"id": [f"s{i}" for i in range(rows)], "pc": ["LS1 1AA"] * rows, **notes}).to_csv(
        src, index=False
    )
    chunk = next(iter(TableReader(src, n).chunks()))
    assert chunk["note1"].array._pa_array.num_chunks > 1  # the case in question
    with pytest.raises(TypeError):
        pa.RecordBatch.from_pandas(chunk, preserve_index=False)  # what the digest first used
    whole = chunk.copy()
    for name in chunk.columns:  # the same cells, each column in one piece
        whole[name] = pd.array(chunk[name].tolist(), dtype=chunk[name].dtype)
    assert draw_ahead._arrow_bytes(chunk) is not None
    assert draw_ahead.DrawAhead._digest(chunk) == draw_ahead.DrawAhead._digest(whole)
    changed = chunk.copy()
    changed.loc[n - 1, "pc"] = "LS1 1AB"
    assert draw_ahead.DrawAhead._digest(changed) != draw_ahead.DrawAhead._digest(chunk)
    mixed = pd.DataFrame({"id": ["a", 1, None], "pc": ["x", "y", "z"]}, dtype=object)
    assert draw_ahead._arrow_bytes(mixed) is None  # the repr route, still a digest
    assert draw_ahead.DrawAhead._digest(mixed) != draw_ahead.DrawAhead._digest(mixed.iloc[:2])


def test_a_file_of_one_chunk_is_read_once(grid, tmp_path, count_calls):  # noqa: F811
    """A file of one chunk is released from that chunk as the check pass left it, without a
    second read: the same bytes as the same file released in several chunks."""
    from postcode_privacy.release.reader import TableReader

    graph, codes = grid
    src = tmp_path / "in.csv"
    records(codes, 3000).to_csv(src, index=False)
    reads = count_calls(TableReader, "chunks")
    release(src, tmp_path / "one.csv", graph, chunk_size=5000)
    assert len(reads) == 1
    release(src, tmp_path / "three.csv", graph, chunk_size=1000)
    assert len(reads) == 3  # checked, then read again to be written
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "three.csv").read_bytes()


@pytest.mark.parametrize("chunk_size", [1000, 5000])
def test_an_input_gone_before_it_is_written_is_the_inputs_error(
    grid,  # noqa: F811
    tmp_path,
    monkeypatch,
    chunk_size,
):
    """The input deleted between the check pass and the writing pass: whether the writing
    pass reads it again (several chunks) or not (one chunk, found at the final hash), the
    error is that the input cannot be read, and nothing is written (found by a hostile
    review: the final hash had called it an output failure)."""
    from postcode_privacy.release import files

    graph, codes = grid
    src = tmp_path / "in.csv"
    records(codes, 3000).to_csv(src, index=False)
    real_open_writer = files.open_writer

    def delete_input_then_open(*args, **kwargs):
        src.unlink()
        return real_open_writer(*args, **kwargs)

    monkeypatch.setattr(files, "open_writer", delete_input_then_open)
    with pytest.raises(InputDataError, match="the input file does not exist"):
        release(src, tmp_path / "out.csv", graph, chunk_size=chunk_size)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
