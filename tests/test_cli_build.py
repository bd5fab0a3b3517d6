"""``postcode-privacy build`` on small files in the published layouts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from postcode_privacy import Graph
from postcode_privacy.cli import main
from postcode_privacy.graph.artefact import terminated_sidecar

FIXTURES = Path(__file__).parent / "fixtures" / "sources"


def test_build_from_onspd_with_population_and_terminated_sidecar(tmp_path, capsys):
    out = tmp_path / "g.ppgraph"
    code = main(
        [
            "build",
            "--onspd",
            str(FIXTURES / "ONSPD_FEB_2024_UK.csv"),
            "--population",
            str(FIXTURES / "population.csv"),
            "-o",
            str(out),
            "--quiet",
        ]
    )
    assert code == 0, capsys.readouterr().err
    graph = Graph.load(out)
    assert graph.params["prior"] == "population"
    assert graph.params["source"] in {"onspd", "nspl"}
    assert graph.sha256 in capsys.readouterr().out
    assert any(pc.startswith("BT") for pc in graph.postcodes)  # NI kept without --gb-only
    sidecar = terminated_sidecar(out)
    if sidecar.exists():
        terminated = pd.read_parquet(sidecar)
        assert set(terminated.columns) >= {"postcode", "easting", "northing"}
        assert not set(terminated["postcode"]) & set(graph.postcodes)


def test_gb_only_drops_northern_ireland_and_build_is_reproducible(tmp_path):
    a, b = tmp_path / "a.ppgraph", tmp_path / "b.ppgraph"
    args = ["build", "--onspd", str(FIXTURES / "ONSPD_FEB_2024_UK.csv"), "--gb-only", "--quiet"]
    assert main(args + ["-o", str(a)]) == 0
    assert main(args + ["-o", str(b)]) == 0
    ga, gb = Graph.load(a), Graph.load(b)
    assert not any(pc.startswith("BT") for pc in ga.postcodes)
    assert ga.sha256 == gb.sha256


def test_build_from_codepoint_directory(tmp_path):
    out = tmp_path / "cp.ppgraph"
    assert (
        main(["build", "--codepoint", str(FIXTURES / "codepoint"), "-o", str(out), "--quiet"]) == 0
    )
    assert len(Graph.load(out)) > 3


def test_build_refuses_existing_output_and_needs_one_source(tmp_path, capsys):
    out = tmp_path / "x.ppgraph"
    out.write_bytes(b"keep me")
    assert (
        main(["build", "--codepoint", str(FIXTURES / "codepoint"), "-o", str(out), "--quiet"]) == 5
    )
    assert out.read_bytes() == b"keep me"
    assert main(["build", "-o", str(tmp_path / "y.ppgraph")]) == 8
    assert (
        main(
            [
                "build",
                "--codepoint",
                str(FIXTURES / "codepoint"),
                "--onspd",
                str(FIXTURES / "ONSPD_FEB_2024_UK.csv"),
                "-o",
                str(tmp_path / "z.ppgraph"),
            ]
        )
        == 8
    )


@pytest.mark.slow  # reads the bundled ONS directory of every postcode
def test_terminated_postcodes_of_an_onspd_build_map_to_the_nearest_live_one(tmp_path):
    """AB1 0AA is terminated in the fixture; with --terminated nearest it is released as if it
    were its nearest live postcode (AB10 1AB/AB10 1AF share the nearest centroid)."""
    from postcode_privacy import Key
    from postcode_privacy.keyfile import write_key_file

    graph_path = tmp_path / "g.ppgraph"
    assert (
        main(
            [
                "build",
                "--onspd",
                str(FIXTURES / "ONSPD_FEB_2024_UK.csv"),
                "--gb-only",
                "-o",
                str(graph_path),
                "--quiet",
            ]
        )
        == 0
    )
    assert terminated_sidecar(graph_path).exists()
    key_path = tmp_path / "k.key"
    write_key_file(Key.generate(), key_path)
    records = tmp_path / "in.csv"
    records.write_text("id,pc\n1,AB1 0AA\n2,EH1 1YZ\n", encoding="utf-8")
    base = [
        "perturb",
        str(records),
        "--key",
        str(key_path),
        "--epsilon",
        "1",
        "--id-column",
        "id",
        "--postcode-column",
        "pc",
        "--graph",
        str(graph_path),
        "-q",
    ]
    assert main(base + ["-o", str(tmp_path / "strict.csv")]) == 3  # unknown postcode by default
    assert not (tmp_path / "strict.csv").exists()
    assert main(base + ["-o", str(tmp_path / "out.csv"), "--terminated", "nearest"]) == 0
    out = pd.read_csv(tmp_path / "out.csv", dtype=str)
    assert len(out) == 2 and out["postcode_dp"].notna().all()
    import json

    manifest = json.loads((tmp_path / "out.csv.manifest.json").read_text(encoding="utf-8"))
    audit = json.loads((tmp_path / "out.csv.audit.json").read_text(encoding="utf-8"))
    assert audit["counts"]["terminated_mapped"] == 1
    sidecar = terminated_sidecar(graph_path)
    from postcode_privacy.release.terminated import _table_digest

    # The table's digest (what a mapping reads), as for a supplied table or the bundled one.
    assert manifest["terminated_locations"] == {
        "source": "sidecar",
        "file": sidecar.name,
        "sha256": _table_digest(pd.read_parquet(sidecar)),
    }


def _onspd_artefact_and_records(tmp_path):
    from postcode_privacy import Key
    from postcode_privacy.keyfile import write_key_file

    graph_path = tmp_path / "g.ppgraph"
    assert (
        main(
            [
                "build",
                "--onspd",
                str(FIXTURES / "ONSPD_FEB_2024_UK.csv"),
                "--gb-only",
                "-o",
                str(graph_path),
                "--quiet",
            ]
        )
        == 0
    )
    key_path = tmp_path / "k.key"
    write_key_file(Key.generate(), key_path)
    records = tmp_path / "in.csv"
    records.write_text("id,pc\n1,AB1 0AA\n2,EH1 1YZ\n", encoding="utf-8")
    args = [
        "perturb",
        str(records),
        "--key",
        str(key_path),
        "--epsilon",
        "1",
        "--id-column",
        "id",
        "--postcode-column",
        "pc",
        "--graph",
        str(graph_path),
        "-q",
        "--terminated",
        "nearest",
        "-o",
        str(tmp_path / "out.csv"),
    ]
    return graph_path, args


def test_the_artefact_records_its_sidecar_hash(tmp_path):
    import hashlib

    graph_path, _ = _onspd_artefact_and_records(tmp_path)
    sidecar = terminated_sidecar(graph_path)
    from postcode_privacy.release.terminated import _table_digest

    recorded = Graph.load(graph_path).provenance["terminated_sidecar"]
    assert recorded["sha256"] == hashlib.sha256(sidecar.read_bytes()).hexdigest()
    assert recorded["table_sha256"] == _table_digest(pd.read_parquet(sidecar))
    assert recorded["file"] == sidecar.name and recorded["rows"] >= 1


def test_a_sidecar_written_by_another_pyarrow_gives_the_same_manifest(
    tmp_path, monkeypatch, capsys
):
    """The sidecar's Parquet bytes follow the pyarrow that wrote them (its version is in the
    file), and the manifest named the sidecar by their sha256: the same sources built on two
    machines gave the same release and graph but manifests that differed, two releases in the
    threat model's terms (a review across machines, round 30).  It now names the table's."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, args = _onspd_artefact_and_records(tmp_path / "a")
    original = pd.DataFrame.to_parquet

    def other_writer(self, *a, **k):  # another writer: the same table, other bytes
        return original(self, *a, **{**k, "compression": "gzip"})

    monkeypatch.setattr(pd.DataFrame, "to_parquet", other_writer)
    second, _ = _onspd_artefact_and_records(tmp_path / "b")
    monkeypatch.setattr(pd.DataFrame, "to_parquet", original)
    assert terminated_sidecar(first).read_bytes() != terminated_sidecar(second).read_bytes()
    key = args[args.index("--key") + 1]
    written = []
    for graph in (first, second):
        out = graph.parent / "out.csv"
        swapped = [str(graph) if a == str(first) else a for a in args]
        swapped[swapped.index("--key") + 1] = key
        swapped[-1] = str(out)
        assert main(swapped) == 0, capsys.readouterr().err
        written.append((out.read_bytes(), out.with_name("out.csv.manifest.json").read_bytes()))
    assert written[0] == written[1]


def test_an_edited_sidecar_is_refused_cleanly(tmp_path, capsys):
    # Moving a terminated postcode's coordinates would change who is released where.
    graph_path, args = _onspd_artefact_and_records(tmp_path)
    sidecar = terminated_sidecar(graph_path)
    table = pd.read_parquet(sidecar)
    table.loc[0, "easting"] = table.loc[0, "easting"] + 5000
    sidecar.write_bytes(table.to_parquet(index=False))
    assert main(args) == 6
    err = capsys.readouterr().err
    assert "sidecar does not match" in err and "Traceback" not in err
    assert not (tmp_path / "out.csv").exists()


def test_a_corrupt_sidecar_is_refused_cleanly(tmp_path, capsys):
    graph_path, args = _onspd_artefact_and_records(tmp_path)
    sidecar = terminated_sidecar(graph_path)
    data = bytearray(sidecar.read_bytes())
    sidecar.write_bytes(bytes(data[: len(data) // 2]))
    assert main(args) == 6
    err = capsys.readouterr().err
    assert "sidecar" in err and "Traceback" not in err
    assert not (tmp_path / "out.csv").exists()


def test_a_missing_sidecar_is_refused_not_replaced_by_the_bundled_directory(tmp_path, capsys):
    graph_path, args = _onspd_artefact_and_records(tmp_path)
    terminated_sidecar(graph_path).unlink()
    assert main(args) == 6
    assert "missing" in capsys.readouterr().err
    assert not (tmp_path / "out.csv").exists()


def test_perturb_frame_uses_the_sidecar_as_the_cli_does_and_refuses_an_edited_copy(tmp_path):
    """From Python: ``perturb_frame(..., terminated_locations=read_sidecar(path))`` releases
    what ``perturb --graph ARTEFACT --terminated nearest`` releases (it raised TypeError: no
    such option).  A copy of the table edited after reading keeps the file's sha256 in its
    ``attrs`` but is refused; a change made after the plan was built changes nothing.  Found
    by an audit, which moved a terminated postcode onto another place through such a copy."""
    import json

    from postcode_privacy import perturb_frame, read_key_file, read_sidecar
    from postcode_privacy.errors import ArtefactError

    graph_path, args = _onspd_artefact_and_records(tmp_path)
    assert main(args) == 0
    cli = pd.read_csv(tmp_path / "out.csv", dtype=str, keep_default_na=False)
    manifest = json.loads((tmp_path / "out.csv.manifest.json").read_text(encoding="utf-8"))
    records = pd.read_csv(tmp_path / "in.csv", dtype=str, keep_default_na=False)
    graph = Graph.load(graph_path)
    options = dict(
        key=read_key_file(tmp_path / "k.key"),
        graph=graph,
        epsilon=1,
        id_column="id",
        postcode_column="pc",
        terminated="nearest",
    )
    table = read_sidecar(terminated_sidecar(graph_path))
    released = perturb_frame(records, terminated_locations=table, **options)
    assert list(released["postcode_dp"]) == list(cli["postcode_dp"])
    assert (
        released.attrs["postcode_privacy"]["terminated_locations"]
        == (manifest["terminated_locations"])
    )
    edited = table.copy()
    edited.loc[0, "easting"] = edited.loc[0, "easting"] + 5000
    with pytest.raises(ArtefactError, match="changed after read_sidecar read it"):
        perturb_frame(records, terminated_locations=edited, **options)
    as_bytes = table.copy()  # pandas hashes b"AB1 0AA" as it hashes "AB1 0AA"; a mapping does not
    as_bytes["postcode"] = [v.encode() for v in as_bytes["postcode"]]
    with pytest.raises(ArtefactError, match="changed after read_sidecar read it"):
        perturb_frame(records, terminated_locations=as_bytes, **options)
    stripped = table.copy()  # as some pandas operations leave it (pd.concat in pandas 2)
    stripped.attrs = {}
    with pytest.raises(ArtefactError, match="must be the one read_sidecar returns"):
        perturb_frame(records, terminated_locations=stripped, **options)
    with pytest.raises(ArtefactError, match="read_sidecar from postcode_privacy\\)"):
        perturb_frame(records, **options)  # the artefact records a sidecar: it is needed
    from postcode_privacy.release import ReleasePlan

    plan = ReleasePlan(terminated_locations=table, **options)
    table["easting"] = float("nan")  # after the plan checked it: the plan keeps its own copy
    out, _ = plan.process_chunk(records, 0)
    assert list(out["postcode_dp"]) == list(cli["postcode_dp"])


def test_the_bundled_table_of_terminated_postcodes_is_pinned(monkeypatch):
    """The bundled directory's table shapes released postcodes as a sidecar does, so it is
    checked against a pinned sha256 on loading and the manifest records that sha256 (an
    audit found only the package's name and version recorded, and nothing checked)."""
    from postcode_privacy.errors import ArtefactError
    from postcode_privacy.release import terminated
    from postcode_privacy.sources import codepoint, directory

    table = pd.DataFrame({"postcode": ["AB1 0AA"], "easting": [1.0], "northing": [2.0]})
    monkeypatch.setattr(terminated, "_bundled", None)
    monkeypatch.setattr(codepoint, "read_codepoint", lambda: type("C", (), {"postcodes": []}))
    monkeypatch.setattr(directory, "bundled_terminated", lambda live: table)
    with pytest.raises(ArtefactError, match="not give the pinned table"):
        terminated.bundled_terminated_locations()
    monkeypatch.setattr(terminated, "BUNDLED_TERMINATED_SHA256", terminated._table_digest(table))
    given = terminated.bundled_terminated_locations()
    assert given.equals(table) and given is not table  # a copy: the pinned one stays as checked
    described = terminated.describe_source("nearest", None)
    assert described["sha256"] == terminated._table_digest(table)


def test_a_supplied_tables_digest_is_of_what_the_mapping_reads_not_how_pandas_stores_it():
    """The manifest's sha256 of a supplied table is the same whatever the dtypes (pandas 2 reads
    text as object, with None; pandas 3 as "str", with NaN; numpy 2 reprs its scalars as
    ``np.float64(...)``), and it changes when what the mapping reads changes."""
    import numpy as np

    from postcode_privacy.release.terminated import _table_digest

    text = pd.DataFrame(
        {"postcode": ["AB1 0AA", None], "easting": [1.0, 2.0], "northing": [3.0, float("nan")]}
    ).astype({"postcode": "str"})
    objects = pd.DataFrame(
        {
            "postcode": ["AB1 0AA", None],
            "easting": np.array([np.float64(1), np.int64(2)], dtype=object),
            "northing": [np.float32(3), "not a number"],
        }
    )
    assert _table_digest(text) == _table_digest(objects)
    assert _table_digest(objects.assign(easting=[1.5, 2])) != _table_digest(objects)
    assert _table_digest(objects.assign(postcode=[b"AB1 0AA", None])) != _table_digest(objects)


def test_a_directory_at_the_artefacts_name_is_exit_8_as_for_every_output(tmp_path, capsys):
    """The exit code table puts "an output path that is a directory" at 8; click's own check
    made ``build`` exit 2 (a review)."""
    (tmp_path / "out").mkdir()
    args = ["build", "--onspd", str(FIXTURES / "ONSPD_FEB_2024_UK.csv"), "--gb-only"]
    assert main([*args, "-o", str(tmp_path / "out"), "--quiet"]) == 8
    assert "is a directory" in capsys.readouterr().err
