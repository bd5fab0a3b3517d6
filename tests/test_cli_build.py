"""``postcode-privacy build`` on small files in the published layouts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from postcode_privacy import Graph
from postcode_privacy.cli import main
from postcode_privacy.commands.build import terminated_sidecar

FIXTURES = Path(__file__).parent / "fixtures" / "sources"


def test_build_from_onspd_with_population_and_terminated_sidecar(tmp_path, capsys):
    out = tmp_path / "g.ppgraph"
    code = main(["build", "--onspd", str(FIXTURES / "ONSPD_FEB_2024_UK.csv"),
                 "--population", str(FIXTURES / "population.csv"), "-o", str(out), "--quiet"])
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
    assert main(["build", "--codepoint", str(FIXTURES / "codepoint"), "-o", str(out), "--quiet"]) == 0
    assert len(Graph.load(out)) > 3


def test_build_refuses_existing_output_and_needs_one_source(tmp_path, capsys):
    out = tmp_path / "x.ppgraph"
    out.write_bytes(b"keep me")
    assert main(["build", "--codepoint", str(FIXTURES / "codepoint"), "-o", str(out), "--quiet"]) == 5
    assert out.read_bytes() == b"keep me"
    assert main(["build", "-o", str(tmp_path / "y.ppgraph")]) == 8
    assert main(["build", "--codepoint", str(FIXTURES / "codepoint"), "--onspd",
                 str(FIXTURES / "ONSPD_FEB_2024_UK.csv"), "-o", str(tmp_path / "z.ppgraph")]) == 8


@pytest.mark.slow  # reads the bundled ONS directory of every postcode
def test_terminated_postcodes_of_an_onspd_build_map_to_the_nearest_live_one(tmp_path):
    """AB1 0AA is terminated in the fixture; with --terminated nearest it is released as if it
    were its nearest live postcode (AB10 1AB/AB10 1AF share the nearest centroid)."""
    from postcode_privacy import Key
    from postcode_privacy.keyfile import write_key_file

    graph_path = tmp_path / "g.ppgraph"
    assert main(["build", "--onspd", str(FIXTURES / "ONSPD_FEB_2024_UK.csv"), "--gb-only",
                 "-o", str(graph_path), "--quiet"]) == 0
    assert terminated_sidecar(graph_path).exists()
    key_path = tmp_path / "k.key"
    write_key_file(Key.generate(), key_path)
    records = tmp_path / "in.csv"
    records.write_text("id,pc\n1,AB1 0AA\n2,EH1 1YZ\n", encoding="utf-8")
    base = ["perturb", str(records), "--key", str(key_path), "--epsilon", "1", "--id-column", "id",
            "--postcode-column", "pc", "--graph", str(graph_path), "-q"]
    assert main(base + ["-o", str(tmp_path / "strict.csv")]) == 3  # unknown postcode by default
    assert not (tmp_path / "strict.csv").exists()
    assert main(base + ["-o", str(tmp_path / "out.csv"), "--terminated", "nearest"]) == 0
    out = pd.read_csv(tmp_path / "out.csv", dtype=str)
    assert len(out) == 2 and out["postcode_dp"].notna().all()
    import json
    manifest = json.loads((tmp_path / "out.csv.manifest.json").read_text(encoding="utf-8"))
    assert manifest["counts"]["terminated_mapped"] == 1
