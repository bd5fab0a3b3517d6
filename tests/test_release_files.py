"""release_file: formats, chunking, the manifest, atomic output and terminated postcodes."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import multiprocessing
import os
import platform

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from graphs import leeds_grid

from postcode_privacy import InputDataError, InvalidParameterError, Key, OutputExistsError
from postcode_privacy.engine import batch as engine_batch
from postcode_privacy.release import ReleasePlan, release_file
from postcode_privacy.release.csv_text import tz_database
from postcode_privacy.release.manifest import PUBLISHABLE_FIELDS, read_audit
from postcode_privacy.release.plan import PendingChunk


@pytest.fixture(scope="module")
def grid():
    return leeds_grid(colocated=True)


@pytest.fixture(scope="module")
def key():
    return Key.from_bytes(b"k" * 32)


@pytest.fixture
def chunk_by_chunk(monkeypatch):
    """Releases drawn chunk by chunk, overlapped with the checks and writes, as a file too
    large to be drawn ahead in one batch is (release/draw_ahead.py; test_draw_ahead.py)."""
    from postcode_privacy.release import draw_ahead

    monkeypatch.setattr(draw_ahead, "MAX_RECORDS", 0)


def records(codes, n=25):
    return pd.DataFrame(
        {
            "person": [f"{i:05d}" for i in range(n)],
            "pc": [codes[(7 * i) % 36] for i in range(n)],
            "note": [f"row {i}, with a comma" if i % 3 == 0 else "" for i in range(n)],
        }
    )


def write_csv(df, path):
    df.to_csv(path, index=False)
    return path


def run(input_path, output_path, graph, key, **options):
    return release_file(
        input_path,
        output_path,
        key=key,
        epsilon=options.pop("epsilon", "1"),
        id_column=options.pop("id_column", "person"),
        postcode_column=options.pop("postcode_column", "pc"),
        graph=graph,
        **options,
    )


def leftovers(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_csv_release_keeps_text_and_order_and_matches_perturb_frame(grid, key, tmp_path):
    graph, codes = grid
    df = records(codes)
    src = write_csv(df, tmp_path / "in.csv")
    manifest = run(src, tmp_path / "out.csv", graph, key, chunk_size=4)
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    assert list(out.columns) == ["person", "note", "postcode_dp"]
    assert out["person"].tolist() == df["person"].tolist()  # leading zeros kept
    assert out["note"].tolist() == df["note"].tolist()
    from postcode_privacy import perturb_frame

    expected = perturb_frame(
        df, key=key, epsilon=1, id_column="person", postcode_column="pc", graph=graph
    )["postcode_dp"].tolist()
    assert out["postcode_dp"].tolist() == expected
    counts = read_audit(tmp_path / "out.csv")["counts"]
    assert counts["records"] == 25 and counts["released"] == 25
    assert "counts" not in manifest


def test_the_layout_along_the_map_is_made_ahead_only_for_an_input_that_can_use_it(
    key, tmp_path, monkeypatch
):
    """At a radius that sorts a batch along the map, the release makes that layout in a
    thread while it checks the records, but only if the input can hold ``ALONG_MAP_SOURCES``
    distinct postcodes: a Parquet file's row count or an uncompressed CSV file's size must
    allow it; a compressed CSV file's size cannot rule it out (a reviewer found every CSV
    release making it, in vain for a small one)."""
    import threading

    from postcode_privacy.engine import landmarks

    made = []
    real = landmarks.map_layout

    def counted(graph, loc_mass):
        made.append(threading.current_thread().name)
        return real(graph, loc_mass)

    monkeypatch.setattr(landmarks, "map_layout", counted)
    radius = engine_batch.ALONG_MAP_RADIUS
    _, codes = leeds_grid(colocated=True)
    small = records(codes)
    # rows of padding: a plain CSV file large enough to hold ALONG_MAP_SOURCES postcodes
    padded = small.assign(note="x" * (6 * engine_batch.ALONG_MAP_SOURCES // len(small)))
    for name, frame, ahead in [
        ("small.csv", small, False),
        ("small.parquet", small, False),
        ("small.csv.gz", small, True),
        ("padded.csv", padded, True),
    ]:
        graph, _ = leeds_grid(colocated=True)  # a new graph: its own tables, no layout yet
        made.clear()
        source = tmp_path / name
        if name.endswith(".parquet"):
            frame.to_parquet(source, index=False)
        else:
            frame.to_csv(source, index=False)
        run(source, tmp_path / f"out-{name}", graph, key, radius=radius)
        thread = landmarks.graph_tables(graph)._making
        if thread is not None:
            thread.join()
        assert made == (["postcode-privacy-layout"] if ahead else []), name


def test_chunk_size_does_not_change_the_output(grid, key, tmp_path):
    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    run(src, tmp_path / "a.csv", graph, key, chunk_size=1)
    run(src, tmp_path / "b.csv", graph, key, chunk_size=100_000)
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


@pytest.mark.parametrize(
    "suffix_in,suffix_out",
    [(".csv", ".parquet"), (".parquet", ".csv"), (".pq", ".pq"), (".csv.gz", ".csv.gz")],
)
def test_formats_by_extension(grid, key, tmp_path, suffix_in, suffix_out):
    graph, codes = grid
    df = records(codes, 10)
    reference = tmp_path / "reference.csv"
    run(write_csv(df, tmp_path / "plain.csv"), reference, graph, key)
    expected = pd.read_csv(reference, dtype=str, keep_default_na=False)["postcode_dp"].tolist()

    src = tmp_path / f"in{suffix_in}"
    if suffix_in in (".parquet", ".pq"):
        df.to_parquet(src, index=False)
    else:
        df.to_csv(src, index=False)
    out = tmp_path / f"out{suffix_out}"
    manifest = run(src, out, graph, key, chunk_size=3)
    if suffix_out in (".parquet", ".pq"):
        result = pq.read_table(out)
        assert result.schema.field("postcode_dp").type == pa.string()
        result = result.to_pandas()
    else:
        result = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert result["postcode_dp"].tolist() == expected
    assert result["person"].tolist() == df["person"].tolist()
    assert manifest["output"]["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    if suffix_out == ".csv.gz":
        assert gzip.decompress(out.read_bytes()).decode().startswith("person,note,postcode_dp\n")


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".csv.bz2", ".csv.xz", ".parquet"])
def test_the_manifest_names_what_shapes_the_bytes_beyond_the_records(grid, key, tmp_path, suffix):
    """The text of a compressed CSV release has its own digest (the compressed bytes depend on
    the compressor library), and the libraries whose versions shape the file are recorded."""
    import bz2
    import lzma
    import zlib

    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    out = tmp_path / f"out{suffix}"
    output = run(src, out, graph, key)["output"]
    plain = tmp_path / "plain.csv"
    assert output["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    if suffix == ".parquet":
        assert "uncompressed_sha256" not in output
        assert output["written_with"] == {"pyarrow": pa.__version__}
        metadata = pq.ParquetFile(out).metadata
        assert pa.__version__ in metadata.created_by  # the version pyarrow writes into the file
        assert metadata.format_version == "2.6"
        assert metadata.row_group(0).column(0).compression == "SNAPPY"
        return
    run(src, plain, graph, key)
    text = {".csv": bytes, ".csv.gz": gzip.decompress, ".csv.bz2": bz2.decompress,
            ".csv.xz": lzma.decompress}[suffix](out.read_bytes())  # fmt: skip
    assert text == plain.read_bytes()
    if suffix == ".csv":
        assert "uncompressed_sha256" not in output
    else:
        assert output["uncompressed_sha256"] == hashlib.sha256(text).hexdigest()
    # The cells of a CSV input are text, copied: pandas does not shape them.  Python's
    # compressing module (and the library it was built with) does.
    expected = {} if suffix == ".csv" else {"python": platform.python_version()}
    if suffix == ".csv.gz":
        expected["zlib"] = zlib.ZLIB_RUNTIME_VERSION
    assert output["written_with"] == expected


@pytest.mark.parametrize("suffix", [".csv", ".csv.xz"])
def test_the_tz_database_is_recorded_only_where_it_shapes_a_cells_text(grid, key, tmp_path, suffix):
    """Typed cells follow the package's own rules (not pandas'), save a named zone's local
    time, which the tz database gives: its version is recorded then, and only then."""
    graph, codes = grid
    table = pa.Table.from_pandas(records(codes), preserve_index=False)
    n = table.num_rows
    python = {"python": platform.python_version()} if suffix == ".csv.xz" else {}
    for zone, recorded in [
        (None, False),
        ("+05:30", False),
        ("UTC", False),
        ("Europe/London", True),
    ]:
        src = tmp_path / f"in-{zone and zone.replace('/', '-')}.parquet"
        when = pa.array(range(n), pa.timestamp("s", tz=zone))
        pq.write_table(table.append_column("when", when), src)
        output = run(src, tmp_path / f"out-{src.stem}{suffix}", graph, key)["output"]
        expected = dict(python)
        if recorded:
            expected |= tz_database(["Europe/London"])
        assert output["written_with"] == expected
    recorded = tz_database(["Europe/London"])
    assert "unknown" not in recorded["tz_database"]  # this machine's says its version


def test_the_tz_record_names_the_zone_files_read_not_another_database(tmp_path):
    """zoneinfo reads a zone from the first TZPATH directory holding it; the manifest named
    the `tzdata` package's version whenever no directory had a `tzdata.zi` (as on macOS), and
    two machines writing different local times recorded the same (a review across
    environments, round 28). It now names the source each zone is read from and digests
    the zone files themselves."""
    import shutil
    import zoneinfo

    london = zoneinfo.ZoneInfo("Europe/London")
    system = next(r for r in zoneinfo.TZPATH if os.path.isfile(os.path.join(r, "Europe/London")))
    (tmp_path / "Europe").mkdir()
    shutil.copyfile(os.path.join(system, "Europe/London"), tmp_path / "Europe" / "London")
    try:
        zoneinfo.reset_tzpath(to=[str(tmp_path)])
        first = tz_database(["Europe/London"])
        assert first["tz_database"] == "system, version unknown"
        data = (tmp_path / "Europe" / "London").read_bytes()
        again = hashlib.sha256(
            len(b"Europe/London").to_bytes(4, "big") + b"Europe/London"
            + len(data).to_bytes(8, "big") + data
        )  # fmt: skip
        assert first["tz_zones_sha256"] == again.hexdigest()
        shutil.copyfile(os.path.join(system, "Europe/Paris"), tmp_path / "Europe" / "London")
        assert tz_database(["Europe/London"])["tz_zones_sha256"] != first["tz_zones_sha256"]
    finally:
        zoneinfo.reset_tzpath()
    assert london is zoneinfo.ZoneInfo("Europe/London")  # (the cache, and so other tests, unharmed)


def test_parquet_types_and_nulls_survive(grid, key, tmp_path):
    graph, codes = grid
    table = pa.table(
        {
            "person": pa.array([1, 2, 3], pa.int64()),
            "pc": pa.array([codes[0], "nonsense", codes[2]]),
            "weight": pa.array([1.5, None, 2.5]),
        }
    )
    pq.write_table(table, tmp_path / "in.parquet")
    run(tmp_path / "in.parquet", tmp_path / "out.parquet", graph, key, on_error="null")
    out = pq.read_table(tmp_path / "out.parquet")
    assert out.schema.field("person").type == pa.int64()
    assert out.column("weight").to_pylist() == [1.5, None, 2.5]
    released = out.column("postcode_dp").to_pylist()
    assert released[1] is None and released[0] is not None
    # Integer identifiers from Parquet equal their text in CSV.
    csv_in = write_csv(
        pd.DataFrame({"person": ["1", "3"], "pc": [codes[0], codes[2]]}), tmp_path / "ids.csv"
    )
    run(csv_in, tmp_path / "ids_out.csv", graph, key)
    from_csv = pd.read_csv(tmp_path / "ids_out.csv", dtype=str)["postcode_dp"].tolist()
    assert from_csv == [released[0], released[2]]


def test_manifest_records_the_release_but_never_the_key(grid, key, tmp_path):
    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    out = tmp_path / "out.csv"
    returned = run(src, out, graph, key, epsilon="0.10", radius=6, on_error="drop")
    text = (tmp_path / "out.csv.manifest.json").read_text(encoding="utf-8")
    manifest = json.loads(text)
    assert manifest == returned
    assert manifest["format"] == "postcode-privacy-manifest" and manifest["format_version"] == 3
    assert manifest["epsilon"] == "0.1" and manifest["radius"] == 6
    plan = ReleasePlan(
        key=key, epsilon="0.1", radius=6, id_column="person", postcode_column="pc", graph=graph
    )
    bound = plan.mechanism.teleport_bound
    assert manifest["teleport_bound"]["exact"] == f"{bound.numerator}/{bound.denominator}"
    assert manifest["graph"]["sha256"] == graph.sha256
    assert manifest["key_fingerprint"] == key.fingerprint
    assert "input" not in manifest
    assert manifest["audit_file"] == "out.csv.audit.json"
    assert manifest["output"]["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert manifest["output"]["rows"] == 25
    assert manifest["on_error"] == "drop" and manifest["terminated"] == "error"
    assert manifest["columns"] == {
        "id": "person",
        "postcode": "pc",
        "out": "postcode_dp",
        "source_postcode_kept": False,
    }
    assert manifest["prior"] == "uniform"
    assert manifest["created"].endswith("+00:00")
    secret = key.to_file_bytes().decode().split("\n")[1][5:]
    assert secret not in text and (b"k" * 32).decode() not in text


def test_nothing_is_written_when_a_row_fails(grid, key, tmp_path):
    graph, codes = grid
    df = records(codes)
    df.loc[[2, 17, 24], "pc"] = ["", "NOPE", "ZZ9 9ZZ"]
    src = write_csv(df, tmp_path / "in.csv")
    before = src.read_bytes()
    with pytest.raises(InputDataError) as info:
        run(src, tmp_path / "out.csv", graph, key, chunk_size=7)
    assert [row for row, _ in info.value.row_errors] == [3, 18, 25]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    assert src.read_bytes() == before


def test_validation_pass_runs_before_any_perturbation(grid, key, tmp_path, monkeypatch):
    graph, codes = grid
    df = records(codes)
    df.loc[24, "pc"] = "NOPE"
    src = write_csv(df, tmp_path / "in.csv")
    calls = []
    monkeypatch.setattr(PendingChunk, "start", lambda self, *rest: calls.append(1))
    with pytest.raises(InputDataError):
        run(src, tmp_path / "out.csv", graph, key, chunk_size=5)
    assert calls == []


def test_an_interrupted_run_leaves_nothing(grid, key, tmp_path, monkeypatch, chunk_by_chunk):
    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    original = PendingChunk.start
    calls = []

    def interrupt_second_chunk(self, *rest):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, *rest)

    monkeypatch.setattr(PendingChunk, "start", interrupt_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        run(src, tmp_path / "out.parquet", graph, key, chunk_size=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def _spy(monkeypatch, cls, name, events, label):
    """Record ``label`` in ``events`` each time ``cls.name`` is called, then call it."""
    original = getattr(cls, name)

    def spy(self, *args, **kwargs):
        events.append(label)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, spy)


def test_chunks_overlapped_with_worker_draws_give_the_chunk_by_chunk_release(
    grid, key, tmp_path, monkeypatch, chunk_by_chunk
):
    """With worker processes drawing each chunk, the next chunk is checked before the workers
    are waited for, and the release is byte for byte the one of process_chunk called chunk by
    chunk, and of a run in one chunk."""
    graph, codes = grid
    monkeypatch.setenv("POSTCODE_PRIVACY_WORKERS", "2")
    df = records(codes, n=7000)  # chunks of 2,500, 2,500 and 2,000 records: all use workers
    src = write_csv(df, tmp_path / "in.csv")
    events: list[str] = []
    _spy(monkeypatch, ReleasePlan, "prepare_chunk", events, "check")
    _spy(monkeypatch, engine_batch.Draws, "result", events, "wait")
    _spy(monkeypatch, engine_batch.Draws, "_start_workers", events, "fork")
    run(src, tmp_path / "chunks.csv", graph, key, chunk_size=2500)
    # chunk 1 as the check pass left it; chunk 2 checked while chunk 1 is drawn, and so on
    assert events == ["fork", "check", "wait", "fork", "check", "wait", "fork", "wait"]
    run(src, tmp_path / "whole.csv", graph, key, chunk_size=10_000)
    assert (tmp_path / "chunks.csv").read_bytes() == (tmp_path / "whole.csv").read_bytes()
    plan = ReleasePlan(key=key, epsilon="1", id_column="person", postcode_column="pc", graph=graph)
    one_by_one = pd.concat(
        [plan.process_chunk(df.iloc[i : i + 2500], i)[0] for i in range(0, len(df), 2500)]
    )
    released = pd.read_csv(tmp_path / "chunks.csv", dtype=str, keep_default_na=False)
    assert released["postcode_dp"].tolist() == one_by_one["postcode_dp"].tolist()
    assert multiprocessing.active_children() == []


def test_an_interruption_while_workers_draw_stops_them_and_leaves_nothing(
    grid, key, tmp_path, monkeypatch, chunk_by_chunk
):
    """Ctrl-C while the next chunk is checked (the workers drawing the one before): the workers
    are stopped, nothing is left on disk, and the next release runs normally."""
    graph, codes = grid
    monkeypatch.setenv("POSTCODE_PRIVACY_WORKERS", "2")
    src = write_csv(records(codes, n=6000), tmp_path / "in.csv")
    original = ReleasePlan.prepare_chunk

    def interrupt_second_check(self, df, row_offset=0):
        if row_offset == 3000:  # the release pass's second chunk (the check pass has its own)
            assert engine_batch._PARALLEL_LOCK.locked()  # chunk 1's workers are drawing
            raise KeyboardInterrupt
        return original(self, df, row_offset)

    monkeypatch.setattr(ReleasePlan, "prepare_chunk", interrupt_second_check)
    with pytest.raises(KeyboardInterrupt):
        run(src, tmp_path / "out.csv", graph, key, chunk_size=3000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    assert multiprocessing.active_children() == []
    assert not engine_batch._PARALLEL_LOCK.locked()
    monkeypatch.setattr(ReleasePlan, "prepare_chunk", original)
    run(src, tmp_path / "out.csv", graph, key, chunk_size=3000)
    assert (tmp_path / "out.csv").exists()


def test_an_interruption_just_after_workers_start_stops_them(
    grid, key, tmp_path, monkeypatch, chunk_by_chunk
):
    """Ctrl-C landing the moment a chunk's workers have started (before the release loop has
    taken the chunk over): those workers are stopped too, and the lock is free."""
    graph, codes = grid
    monkeypatch.setenv("POSTCODE_PRIVACY_WORKERS", "2")
    src = write_csv(records(codes, n=6000), tmp_path / "in.csv")
    original = engine_batch.Draws.start
    started = []

    def start_then_interrupt(self):
        starting = self._waiting is not None  # result() calls start() again: not counted
        original(self)
        if starting:
            started.append(self._pool is not None)
            if len(started) == 2:
                raise KeyboardInterrupt

    monkeypatch.setattr(engine_batch.Draws, "start", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run(src, tmp_path / "out.csv", graph, key, chunk_size=3000)
    assert started == [True, True]  # the second chunk's workers were running when it struck
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    assert multiprocessing.active_children() == []
    assert not engine_batch._PARALLEL_LOCK.locked()


def test_draws_must_be_collected_before_others_start(grid, key):
    """Starting a second batch of worker draws from the thread whose first batch is still
    under way is refused (it would wait for itself for ever)."""
    graph, codes = grid
    plan = ReleasePlan(key=key, epsilon="1", id_column="person", postcode_column="pc", graph=graph)
    df = records(codes, n=4000)
    first = plan.prepare_chunk(df.iloc[:2000], 0)
    second = plan.prepare_chunk(df.iloc[2000:], 2000)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("POSTCODE_PRIVACY_WORKERS", "2")
        first.start()
        try:
            with pytest.raises(RuntimeError, match="collect the draws"):
                second.start()
        finally:
            first.cancel()
    assert multiprocessing.active_children() == []
    assert not engine_batch._PARALLEL_LOCK.locked()


def test_existing_output_and_manifest_need_force(grid, key, tmp_path):
    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    out = tmp_path / "out.csv"
    out.write_text("keep me")
    with pytest.raises(OutputExistsError):
        run(src, out, graph, key)
    assert out.read_text() == "keep me"
    run(src, out, graph, key, force=True)
    assert out.read_text().startswith("person,note,postcode_dp")
    out2 = tmp_path / "out2.csv"
    (tmp_path / "out2.csv.manifest.json").write_text("{}")
    with pytest.raises(OutputExistsError, match="manifest"):
        run(src, out2, graph, key)
    assert not out2.exists()
    out3 = tmp_path / "out3.csv"
    (tmp_path / "out3.csv.audit.json").write_text("{}")
    with pytest.raises(OutputExistsError, match="audit"):
        run(src, out3, graph, key)
    assert not out3.exists() and (tmp_path / "out3.csv.audit.json").read_text() == "{}"
    assert leftovers(tmp_path) == []


def test_refuses_to_write_over_the_input(grid, key, tmp_path):
    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    before = src.read_bytes()
    with pytest.raises(OutputExistsError, match="input"):
        run(src, src, graph, key, force=True)
    os.link(src, tmp_path / "hardlink.csv")
    with pytest.raises(OutputExistsError, match="input"):
        run(src, tmp_path / "hardlink.csv", graph, key, force=True)
    (tmp_path / "sub").mkdir()
    with pytest.raises(OutputExistsError, match="input"):
        run(src, tmp_path / "sub" / ".." / "in.csv", graph, key, force=True)
    assert src.read_bytes() == before


def test_output_directory_problems(grid, key, tmp_path):
    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    with pytest.raises(InvalidParameterError, match="output directory .*missing does not exist"):
        run(src, tmp_path / "missing" / "out.csv", graph, key)
    with pytest.raises(InvalidParameterError, match="not a directory"):
        run(src, tmp_path / "in.csv" / "out.csv", graph, key)
    with pytest.raises(InvalidParameterError, match="output's table format.*spreadsheets"):
        run(src, tmp_path / "out.xlsx", graph, key)
    with pytest.raises(InvalidParameterError, match="output's table format from its name: [^;]*$"):
        run(src, tmp_path / "out.txt", graph, key)
    for nameless in ("", ".", "/", ".."):
        with pytest.raises(InvalidParameterError, match="names a directory, not a file"):
            run(src, nameless, graph, key)


def test_a_spreadsheet_or_parquet_file_given_as_csv_is_called_what_it_is(grid, key, tmp_path):
    """A workbook is refused by its name; renamed ``.csv`` (a newcomer's next step), it was
    called text that is not UTF-8, sending them after an encoding."""
    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    (tmp_path / "book.xlsx").write_bytes(src.read_bytes())
    with pytest.raises(InvalidParameterError, match="input's table format.*spreadsheets"):
        run(tmp_path / "book.xlsx", tmp_path / "out.csv", graph, key)
    starts = {
        b"PK\x03\x04\x14\x00\x06\x00\xff": "a zip archive .*save the sheet as CSV",
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1\xff": "old-style .*save the sheet as CSV",
        b"PAR1\x15\x04\xff\xfe": "a Parquet file, not CSV text: name it .parquet",
    }
    for start, message in starts.items():
        renamed = tmp_path / "renamed.csv"
        renamed.write_bytes(start + b"\x00" * 64 + (b"PAR1" if start.startswith(b"PAR1") else b""))
        with pytest.raises(InputDataError, match=message):
            run(renamed, tmp_path / "out.csv", graph, key)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book.xlsx", "in.csv", "renamed.csv"]
    # A CSV whose header starts "PAR1" is no Parquet file (one ends with PAR1 too)
    renamed.write_bytes(b"PAR1_code,postcode\nx,caf\xe9\n")
    with pytest.raises(InputDataError, match="not UTF-8 text .*line 2"):
        run(renamed, tmp_path / "out.csv", graph, key)
    with pytest.raises(
        InvalidParameterError, match="spreadsheets are not written: name the output"
    ):
        run(src, tmp_path / "out.ods", graph, key)


def test_input_changed_during_the_run_is_refused(grid, key, tmp_path, monkeypatch, chunk_by_chunk):
    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    original = PendingChunk.start

    def tamper(self, *rest):
        with open(src, "ab") as handle:
            handle.write(b"99999,LS1 1AA,\n")
        return original(self, *rest)

    monkeypatch.setattr(PendingChunk, "start", tamper)
    with pytest.raises(InputDataError, match="changed"):
        run(src, tmp_path / "out.csv", graph, key, chunk_size=100)
    assert not (tmp_path / "out.csv").exists()


def test_terminated_nearest_with_a_supplied_directory(grid, key, tmp_path):
    graph, codes = grid
    table = pd.DataFrame(
        {
            "postcode": ["ls9 9aa", "LS9 9AB", "LS9 9AD"],
            # 30 m from 'LS1 2BD' (row 1, column 2); equidistant from three locations; no location.
            "easting": [400230.0, 400050.0, np.nan],
            "northing": [430100.0, 430000.0, np.nan],
        }
    )
    df = pd.DataFrame(
        {"person": ["1", "2", "3", "4"], "pc": ["LS9 9AA", "LS9 9AB", codes[5], "LS9 9AD"]}
    )
    src = write_csv(df, tmp_path / "in.csv")
    with pytest.raises(InputDataError) as info:
        run(src, tmp_path / "out.csv", graph, key, terminated="nearest", terminated_locations=table)
    assert [row for row, _ in info.value.row_errors] == [4]
    assert "directory gives no location" in info.value.row_errors[0][1]

    manifest = run(
        src,
        tmp_path / "out.csv",
        graph,
        key,
        terminated="nearest",
        terminated_locations=table,
        on_error="null",
    )
    audit = read_audit(tmp_path / "out.csv")
    assert audit["counts"]["terminated_mapped"] == 2
    assert audit["counts"]["unknown_postcode"] == 1
    assert manifest["terminated_locations"]["source"] == "supplied table"
    assert len(manifest["terminated_locations"]["sha256"]) == 64
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)["postcode_dp"]
    # The release of a mapped row is the release of the live postcode it maps to.
    plan = ReleasePlan(key=key, epsilon="1", id_column="person", postcode_column="pc", graph=graph)
    near = plan.mechanism.perturb(key, "1", "LS1 2BD")
    # Ties (400050, 430000): 'LS1 1AA' (with two co-located postcodes) and 'LS1 1AB' are both
    # 50 m away; the smallest node index wins, and it is a member of the first location.
    tie_winner = min((graph.find(c), c) for c in ("LS1 1AA", "LS1 1AB", "LS2 1ZZ", "LS2 1ZY"))[1]
    tie = plan.mechanism.perturb(key, "2", tie_winner)
    assert out.tolist()[:2] == [near, tie]
    assert out.tolist()[3] == ""


def test_a_subject_at_a_terminated_postcode_and_its_live_one_is_one_draw_not_two(
    grid, key, tmp_path
):
    """A terminated postcode is drawn as the live postcode it maps to, so a subject seen at
    both is released once: the run warned that it was "released more than once" and counted it
    in the audit file (an audit of round 28). Two live postcodes are still two draws."""
    import warnings

    from postcode_privacy.errors import DuplicateSubjectWarning

    graph, codes = grid
    table = pd.DataFrame(
        {"postcode": ["LS9 9AA"], "easting": [400230.0], "northing": [430100.0]}
    )  # 30 m from LS1 2BD
    df = pd.DataFrame({"person": ["1", "1", "2", "2"], "pc": ["LS9 9AA", "LS1 2BD"] + codes[:2]})
    src = write_csv(df, tmp_path / "in.csv")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(src, tmp_path / "out.csv", graph, key, terminated="nearest", terminated_locations=table)
    (warning,) = [w for w in caught if issubclass(w.category, DuplicateSubjectWarning)]
    assert str(warning.message).startswith("1 subject identifier") and "record(s) 4)" in str(
        warning.message
    )
    assert read_audit(tmp_path / "out.csv")["counts"]["identifiers_with_several_postcodes"] == 1
    out = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)["postcode_dp"]
    assert out[0] == out[1]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_the_input_read_is_the_file_its_name_means_here_never_home_nor_a_url(
    grid, key, tmp_path, monkeypatch, suffix
):
    """Given "~/in.csv", pandas read $HOME/in.csv (pyarrow likewise for Parquet) while the
    checks and the audit's sha256 were of ./~/in.csv, and "file:///..." was fetched as a URL
    (a hostile review of round 28): the release held another file's records than the one
    hashed. A name is now read as the file it names, relative to the current directory."""
    graph, codes = grid
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "~").mkdir()
    (tmp_path / "file:" / "elsewhere").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()

    def write(path, people):
        df = pd.DataFrame({"person": people, "pc": codes[: len(people)]})
        if suffix == ".csv":
            df.to_csv(path, index=False)
        else:
            df.to_parquet(path, index=False)

    for named, decoy in (
        (f"~/in{suffix}", home / f"in{suffix}"),
        (f"file:///elsewhere/in{suffix}", tmp_path / "elsewhere" / f"in{suffix}"),
    ):
        write(tmp_path / os.path.normpath(named.replace("file:///", "file:/")), ["meant"])
        write(decoy, ["decoy", "decoy"])
        out = tmp_path / f"out{suffix}"
        run(named, out, graph, key, force=True)
        back = pd.read_csv(out, dtype=str) if suffix == ".csv" else pd.read_parquet(out)
        assert back["person"].tolist() == ["meant"], named
        audit = read_audit(out)
        meant = tmp_path / os.path.normpath(named.replace("file:///", "file:/"))
        assert audit["input"]["sha256"] == hashlib.sha256(meant.read_bytes()).hexdigest()


@pytest.mark.parametrize("end", [b"\r", b"\n", b"\r\n"])
def test_an_unended_last_line_reads_alike_at_every_chunk_size(grid, key, tmp_path, end):
    """pandas' C reader raised "Buffer overflow caught" on a CR-ended file whose last line,
    unended, is a lone comma, whenever a chunk ended before it (chunk sizes 1 and 2 here, or
    a file of 100,001 records at the default), and the run said "an unclosed quote" (a hostile
    review of round 28). The last line is now read as if ended: the same records, alike at
    every chunk size."""
    graph, codes = grid
    src = tmp_path / "in.csv"
    src.write_bytes(end.join([b"pid,pc", f"1,{codes[0]}".encode(), f"2,{codes[1]}".encode(), b","]))
    outputs = set()
    for size in (1, 2, 3, 100):
        out = tmp_path / f"out{size}.csv"
        run(src, out, graph, key, id_column="pid", on_error="drop", chunk_size=size)
        outputs.add(out.read_bytes())
        assert read_audit(out)["counts"]["records"] == 3
    assert len(outputs) == 1
    assert pd.read_csv(out, dtype=str)["pid"].tolist() == ["1", "2"]


def test_source_date_epoch_makes_a_release_made_again_the_same_manifest(
    grid, key, tmp_path, monkeypatch
):
    """The manifest's `created` was always the wall clock, so a release made again from the
    same inputs had the same file but another manifest, and another report (a review across
    environments, round 28). `$SOURCE_DATE_EPOCH` now sets it, as it sets the report's date;
    a malformed value is refused before any file is claimed."""
    from postcode_privacy.errors import InvalidParameterError

    graph, codes = grid
    src = write_csv(pd.DataFrame({"person": ["1", "2"], "pc": codes[:2]}), tmp_path / "in.csv")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    manifests = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        run(src, tmp_path / name / "out.csv", graph, key)
        manifests.append((tmp_path / name / "out.csv.manifest.json").read_bytes())
    assert manifests[0] == manifests[1]
    assert json.loads(manifests[0])["created"] == "2023-11-14T22:13:20+00:00"
    # the private audit file keeps the run's real time, for the custodian
    assert read_audit(tmp_path / "a" / "out.csv")["created"] > "2026"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1.7e9")
    with pytest.raises(InvalidParameterError, match="SOURCE_DATE_EPOCH"):
        run(src, tmp_path / "c.csv", graph, key)
    assert not list(tmp_path.glob("c.csv*"))
    # and the dry run's path check says so too (it passed a release bound to fail)
    from postcode_privacy.release import ReleaseOptions
    from postcode_privacy.release.files import check_release_paths

    options = ReleaseOptions(epsilon="1", id_column="person", postcode_column="pc")
    with pytest.raises(InvalidParameterError, match="SOURCE_DATE_EPOCH"):
        check_release_paths(src, tmp_path / "c.csv", options=options)


def test_a_parquet_input_under_a_name_that_is_not_utf8_is_read(tmp_path):
    """pyarrow takes names as UTF-8 text, so a Parquet file in a directory whose name is not
    was "not a readable Parquet file" (CSV read fine); it is opened by Python then."""
    from postcode_privacy.release.reader import TableReader

    odd = os.fsencode(str(tmp_path)) + b"/d\xff"
    os.mkdir(odd)
    path = os.fsdecode(odd + b"/in.parquet")
    data = io.BytesIO()
    pd.DataFrame({"id": ["1", "2"], "pc": ["LS1 1AA", "LS1 1AB"]}).to_parquet(data)
    with open(path, "wb") as handle:  # (pyarrow cannot take this name either)
        handle.write(data.getvalue())
    chunks = list(TableReader(path, 10).chunks())
    assert [c.astype(object).to_dict("records") for c in chunks] == [
        [{"id": "1", "pc": "LS1 1AA"}, {"id": "2", "pc": "LS1 1AB"}]
    ]


def test_terminated_nearest_needs_coordinates(key):
    from postcode_privacy import Graph

    graph = Graph.from_edges(["LS1 1AA", "LS1 1AB"], [("LS1 1AA", "LS1 1AB")])
    with pytest.raises(InvalidParameterError, match="coordinates"):
        ReleasePlan(
            key=key,
            epsilon=1,
            id_column="a",
            postcode_column="b",
            graph=graph,
            terminated="nearest",
        )


# -- what may be published (issue 10, item 1) ---------------------------------------------------


def test_the_manifest_holds_nothing_computed_from_the_true_input(grid, key, tmp_path):
    # Old manifests held the input's sha256: with the other cells of a record known, hashing
    # one candidate input per postcode recovered the true postcode.  Records failing, dropped
    # and duplicated identifiers are exact statistics of the true data too.
    graph, codes = grid
    df = records(codes)
    df.loc[3, "pc"] = "not a postcode"
    df.loc[5, "person"] = df.loc[4, "person"]  # one identifier, two postcodes
    src = write_csv(df, tmp_path / "in.csv")
    out = tmp_path / "out.csv"
    with pytest.warns(UserWarning):
        manifest = run(src, out, graph, key, on_error="drop")
    text = (tmp_path / "out.csv.manifest.json").read_text(encoding="utf-8")
    assert json.loads(text) == manifest
    assert tuple(manifest) == PUBLISHABLE_FIELDS
    input_sha256 = hashlib.sha256(src.read_bytes()).hexdigest()
    assert input_sha256 not in text and "in.csv" not in text
    for word in (
        "counts",
        "records",
        "failed",
        "dropped",
        "nulled",
        "terminated_mapped",
        "several_postcodes",
        "input",
    ):
        assert word not in text
    # Every number in it is a parameter or a fact of the released file.
    assert manifest["output"]["rows"] == len(pd.read_csv(out)) == 24
    assert manifest["output"]["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()


def test_the_manifest_is_the_same_for_inputs_that_differ_only_in_a_true_postcode(
    grid, key, tmp_path
):
    graph, codes = grid
    manifests = []
    for i, true_postcode in enumerate((codes[0], codes[1])):
        df = records(codes)
        df.loc[0, "pc"] = true_postcode
        src = write_csv(df, tmp_path / f"in{i}.csv")
        manifest = run(src, tmp_path / f"out{i}.csv", graph, key)
        manifests.append(
            {k: v for k, v in manifest.items() if k not in ("created", "output", "audit_file")}
        )
    # Only the released file's own facts (its name, sha256) may differ.
    assert manifests[0] == manifests[1]


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_the_audit_file_is_private_from_the_moment_it_exists(grid, key, tmp_path, monkeypatch):
    """The audit file's temporary file is created owner-only, not made so afterwards: another
    user who opened it in between would keep reading it through that handle.  With a umask
    of 0, any file created with a wider mode would show it at once."""
    import postcode_privacy.atomic as atomic

    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    real_open, born = os.open, {}

    def recording_open(path, flags, mode=0o777, *args, **kwargs):
        fd = real_open(path, flags, mode, *args, **kwargs)
        if flags & os.O_CREAT:
            born[os.path.basename(path)] = os.stat(path).st_mode & 0o777
        return fd

    monkeypatch.setattr(atomic.os, "open", recording_open)
    old_umask = os.umask(0)
    try:
        run(src, tmp_path / "out.csv", graph, key)
    finally:
        os.umask(old_umask)
    audit = [mode for name, mode in born.items() if name.startswith(".out.csv.audit.json.")]
    assert audit == [0o600], born
    assert (tmp_path / "out.csv.audit.json").stat().st_mode & 0o777 == 0o600
    # the publishable files keep the usual mode: the fix is not a blanket umask
    published = [mode for name, mode in born.items() if name.startswith(".out.csv.manifest.")]
    assert published == [0o666], born


def test_the_audit_file_is_private_and_holds_the_true_statistics(grid, key, tmp_path):
    graph, codes = grid
    df = records(codes)
    df.loc[3, "pc"] = "not a postcode"
    src = write_csv(df, tmp_path / "in.csv")
    out = tmp_path / "out.csv"
    manifest = run(src, out, graph, key, on_error="null")
    path = tmp_path / "out.csv.audit.json"
    if os.name == "posix":
        assert (path.stat().st_mode & 0o777) == 0o600
    raw = path.read_text(encoding="utf-8")
    audit = json.loads(raw)
    assert next(iter(audit)) == "WARNING" and "do not publish" in audit["WARNING"]
    assert raw.index("WARNING") < raw.index("sha256")
    assert audit["format"] == "postcode-privacy-audit" and audit["format_version"] == 1
    assert audit["input"] == {
        "path": "in.csv",
        "format": "csv",
        "records": 25,
        "sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
    }
    assert audit["counts"]["failed"] == audit["counts"]["nulled"] == 1
    assert audit["counts"]["identifiers_with_several_postcodes"] == 0
    assert audit["output"] == {"path": "out.csv", "sha256": manifest["output"]["sha256"]}
    assert audit["manifest_file"] == "out.csv.manifest.json"


def test_an_interruption_after_the_manifest_leaves_no_manifest_without_its_output(
    grid, key, tmp_path, monkeypatch
):
    from postcode_privacy.atomic import TempFile

    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    out = tmp_path / "out.csv"
    original = TempFile.commit_new
    moved = []

    def interrupt_the_output(self):
        if self.target == out:
            raise KeyboardInterrupt
        original(self)
        moved.append(self.target.name)

    monkeypatch.setattr(TempFile, "commit_new", interrupt_the_output)
    with pytest.raises(KeyboardInterrupt):
        run(src, out, graph, key)
    # The manifest and audit file went first and were taken back when the output could not follow.
    assert sorted(moved) == ["out.csv.audit.json", "out.csv.manifest.json"]
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["in.csv"]


def test_displacement_and_run_time_go_to_the_audit_file_only(tmp_path, grid):
    """Issue 13 item 9: the displacement summary describes the true data: private audit only."""
    from postcode_privacy.release.displacement import Displacement
    from postcode_privacy.release.manifest import read_audit

    graph, codes = grid
    src = tmp_path / "in.csv"
    pd.DataFrame(
        {"id": [str(i) for i in range(60)], "pc": [codes[i % len(codes)] for i in range(60)]}
    ).to_csv(src, index=False)
    out = tmp_path / "out.csv"
    manifest = release_file(
        src, out, key=Key.generate(), epsilon=1, id_column="id", postcode_column="pc", graph=graph
    )
    run = read_audit(out)["run"]
    released = pd.read_csv(out, dtype=str)["postcode_dp"]
    truth = pd.read_csv(src, dtype=str)["pc"]
    measured = Displacement(graph)
    measured.add(
        np.array([graph.index_of(t) for t in truth]),
        np.array([graph.index_of(r) for r in released]),
    )
    assert run["displacement_m"] == measured.summary()
    assert run["displacement_m"]["records"] == 60 and run["seconds"] >= 0
    text = (tmp_path / "out.csv.manifest.json").read_text()
    assert "displacement" not in text and "run" not in manifest


def test_progress_moves_per_engine_batch_and_adds_up(grid):
    graph, codes = grid
    plan = ReleasePlan(
        key=Key.generate(),
        epsilon=1,
        id_column="id",
        postcode_column="pc",
        graph=graph,
        on_error="null",
    )
    frame = pd.DataFrame(
        {
            "id": [str(i) for i in range(50)],
            "pc": [codes[i % len(codes)] for i in range(49)] + ["nonsense"],
        }
    )
    steps: list[int] = []
    plan.process_chunk(frame, 0, progress=steps.append)
    assert sum(steps) == 50 and steps[-1] == 1  # the unreleasable record is counted too


def test_displacement_quantiles_are_to_the_nearest_bin(grid):
    from postcode_privacy.release.displacement import BIN_METRES, Displacement

    graph, _ = grid
    d = Displacement(graph)
    assert d.summary() is None
    d._bins[[0, 5, 100]] = [10, 5, 5]
    d.count = 20
    assert d.quantile(0.5) == 0 and d.quantile(0.95) == 100 * BIN_METRES


@pytest.mark.parametrize(
    "column",
    [
        pa.array([[0.1 + 0.2], [1.0]] * 3),
        pa.array([list(range(1001)), [1]] * 3),
        pa.array([{"a": 2**62}, {"a": None}] * 3, pa.struct([("a", pa.int64())])),
        pa.array([{"k": 1}, {"k": 2}] * 3, pa.map_(pa.string(), pa.int64())),
        pa.array([b"\x00", b"x"] * 3),
        pa.array([b"a", b"b"] * 3, pa.large_binary()),
        pa.array([b"0123456789abcdef"] * 6, pa.uuid()),
        pa.FixedShapeTensorArray.from_numpy_ndarray(np.arange(6 * 1001).reshape(6, 1001) / 3),
        pa.array([b"a", b"b"] * 3).dictionary_encode(),
    ],
    ids=[
        "list-float",
        "long-list",
        "struct",
        "map",
        "binary",
        "large-binary",
        "uuid-extension",
        "tensor-extension",
        "dictionary-of-binary",
    ],
)
def test_parquet_to_csv_refuses_values_a_cell_cannot_hold(grid, key, tmp_path, column):
    """numpy would print a long list with "...", round floats inside lists and turn int64
    beside a null into floats; binary becomes Python's b'...' text.  Such a column is refused
    before any work, naming the column, never a value, and nothing is written; Parquet output
    keeps it."""
    graph, codes = grid
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"id": [f"s{i}" for i in range(6)], "pc": codes[:6], "x": column}), src)
    out = tmp_path / "out.csv"
    with pytest.raises(InvalidParameterError, match=r"column 3 holds .* Parquet"):
        release_file(
            src, out, key=key, graph=graph, epsilon=1, id_column="id", postcode_column="pc"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]
    release_file(
        src,
        tmp_path / "out.parquet",
        key=key,
        graph=graph,
        epsilon=1,
        id_column="id",
        postcode_column="pc",
    )
    assert pq.read_table(tmp_path / "out.parquet").column("x").combine_chunks().equals(column)


def test_parquet_to_csv_keeps_the_scalar_types_that_read_back_unchanged(grid, key, tmp_path):
    """The refusal is no wider than it must be: these go to CSV, and their text reads back as
    the same values (the JSON extension type stores text)."""
    graph, codes = grid
    columns = {
        "time_us": pa.array([1, 86_399_999_999] * 3, pa.time64("us")),
        "time_ns": pa.array([1, 86_399_999_999_000] * 3, pa.time64("ns")),
        "stamp_ns": pa.array([1, 2] * 3, pa.timestamp("ns", tz="Europe/London")),
        "money": pa.array([1, 2] * 3, pa.decimal128(38, 10)),
        "big": pa.array([2**62, None] * 3, pa.int64()),
        "json": pa.array(['{"a": 1}', "[]"] * 3, pa.json_()),
        "words": pa.array(["x", "y"] * 3).dictionary_encode(),
    }
    src = tmp_path / "in.parquet"
    table = pa.table({"id": [f"s{i}" for i in range(6)], "pc": codes[:6], **columns})
    pq.write_table(table, src)
    out = tmp_path / "out.csv"
    release_file(src, out, key=key, graph=graph, epsilon=1, id_column="id", postcode_column="pc")
    back = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert back["time_us"].tolist()[:2] == ["00:00:00.000001", "23:59:59.999999"]
    assert back["time_ns"].tolist()[:2] == ["00:00:00.000000001", "23:59:59.999999"]
    assert back["stamp_ns"][1] == "1970-01-01 01:00:00.000000002+01:00"
    assert back["big"].tolist()[:2] == [str(2**62), ""]
    assert back["json"].tolist()[:2] == ['{"a": 1}', "[]"] and back["words"][1] == "y"


@pytest.mark.parametrize(
    "value", ["abc", "0", "-1", "1.5", "\u00b2", "9" * 5000, "\u0661\u0662", "1025", "1e3"]
)
def test_a_bad_workers_variable_fails_every_batch_alike(monkeypatch, value):
    """$POSTCODE_PRIVACY_WORKERS is checked whatever the batch's size: it used to be ignored
    below PARALLEL_MIN records and fail only larger files (a hostile review).  "²" (a digit to
    str.isdigit, not to int) and 5,000 nines gave a traceback, Arabic-Indic digits were taken,
    and 10^20 workers would have been forked for."""
    from postcode_privacy.engine.batch import PARALLEL_MIN, default_workers
    from postcode_privacy.errors import InvalidParameterError

    monkeypatch.setenv("POSTCODE_PRIVACY_WORKERS", value)
    for records in (1, PARALLEL_MIN - 1, PARALLEL_MIN):
        with pytest.raises(InvalidParameterError, match="POSTCODE_PRIVACY_WORKERS"):
            default_workers(records)
    monkeypatch.setenv("POSTCODE_PRIVACY_WORKERS", "3")
    assert default_workers(PARALLEL_MIN - 1) == 1 and default_workers(PARALLEL_MIN) == 3


@pytest.mark.slow  # a release per chunk size: about a second and a half
def test_parquet_bytes_do_not_depend_on_the_chunk_size_with_long_text(grid, key, tmp_path):
    """pyarrow's dictionary page limit (1 MiB) is checked at the edges of Arrow chunks, which
    follow the input's chunks: each row group is written as one chunk a column."""
    graph, codes = grid
    n = 40_000
    df = records(codes, n)
    df["note"] = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]  # ~2.6 MB
    src = write_csv(df, tmp_path / "in.csv")
    digests = set()
    for size in (997, 40_000):
        out = tmp_path / f"out{size}.parquet"
        digests.add(run(src, out, graph, key, chunk_size=size)["output"]["sha256"])
    assert len(digests) == 1


def _two_row_groups(path, first, second, index_type=None):
    kind = pa.dictionary(index_type or pa.int32(), pa.string(), ordered=True)
    schema = pa.schema([("person", pa.string()), ("pc", pa.string()), ("level", kind)])
    with pq.ParquetWriter(path, schema) as writer:
        for ids, codes, values in (first, second):
            level = pa.array(values).dictionary_encode().cast(kind)
            writer.write_table(pa.table([pa.array(ids), pa.array(codes), level], schema=schema))


def test_an_ordered_dictionary_that_differs_between_row_groups_keeps_every_value(
    grid, key, tmp_path
):
    graph, codes = grid
    src = tmp_path / "in.parquet"
    _two_row_groups(
        src,
        (["1", "2"], codes[:2], ["a", "b"]),
        (["3", "4"], codes[2:4], ["c", "a"]),
    )
    run(src, tmp_path / "out.parquet", graph, key)
    released = pq.read_table(tmp_path / "out.parquet").column("level")
    assert released.to_pylist() == ["a", "b", "c", "a"]
    assert released.type.ordered


def test_a_dictionary_index_too_small_for_the_row_groups_together_is_refused(grid, key, tmp_path):
    graph, codes = grid
    src = tmp_path / "in.parquet"
    n = 100
    _two_row_groups(
        src,
        ([f"a{i}" for i in range(n)], [codes[i % 36] for i in range(n)], [f"x{i}" for i in range(n)]),
        ([f"b{i}" for i in range(n)], [codes[i % 36] for i in range(n)], [f"y{i}" for i in range(n)]),
        index_type=pa.int8(),
    )  # fmt: skip
    with pytest.raises(InputDataError, match=r"column 3 is dictionary-encoded"):
        run(src, tmp_path / "out.parquet", graph, key, chunk_size=1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_a_fifo_where_an_output_goes_is_refused_without_opening_it(grid, key, tmp_path):
    graph, codes = grid
    src = write_csv(records(codes), tmp_path / "in.csv")
    for name in ("out.csv", "out.csv.manifest.json", "out.csv.audit.json"):
        for force in (False, True):
            for path in tmp_path.iterdir():
                if path != src:
                    path.unlink()
            os.mkfifo(tmp_path / name)
            child = multiprocessing.get_context("fork").Process(
                target=run, args=(src, tmp_path / "out.csv", graph, key), kwargs={"force": force}
            )
            child.start()
            child.join(timeout=30)
            hung = child.is_alive()
            if hung:
                child.kill()
                child.join()
            assert not hung, f"{name}: the release waited on a FIFO"
