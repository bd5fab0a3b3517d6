"""Feedback while working: evaluate, calibrate and report print progress on stderr (plain stage
lines when stderr is not a terminal, as under pytest), and so does a graph build."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_evaluate_graphs import postcode_graph

from postcode_privacy._progress import Progress
from postcode_privacy.cli import main
from postcode_privacy.graph.build import build_graph


@pytest.fixture(scope="module")
def graph_path(tmp_path_factory):
    graph, _ = postcode_graph(80, seed=5)
    path = tmp_path_factory.mktemp("g") / "g.ppg"
    graph.save(path)
    return path


def test_stage_lines_off_a_terminal(capsys):
    progress = Progress("work", terminal=False)
    for done in range(9):
        progress("step", done, 8)
    progress("next", 1, 1)
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [
        "work: step 0/8",
        "work: step 2/8",
        "work: step 4/8",
        "work: step 6/8",
        "work: step 8/8",
        "work: next 1/1",
    ]
    # A log has no bar to show an estimate: the lines part-way say how long is left.
    assert all(", about " in line and " left)" in line for line in lines[1:4])
    assert " left" not in lines[0] and " left" not in lines[4]


def test_time_left_is_the_rate_so_far_applied_to_the_rest():
    from postcode_privacy._progress import timing_text

    assert timing_text(3.0, 1, 4) == "3.0 s, about 9 s left"
    assert timing_text(60.0, 1, 11) == "60.0 s, about 10 min left"
    assert timing_text(3600.0, 1, 3) == "3600.0 s, about 2.0 h left"
    assert timing_text(2.0, 0, 4) == timing_text(2.0, 4, 4) == "2.0 s"
    # No estimate from the first few: 1 of 200,000 records is no rate to go by.
    assert timing_text(0.2, 1, 200_000) == timing_text(0.2, 9_999, 200_000) == "0.2 s"
    assert timing_text(0.2, 10_000, 200_000) == "0.2 s, about 4 s left"
    # The rate since the first report, which came after a one-off build of 1,137.9 s.
    assert timing_text(1147.3, 8_193, 25_000, since=(1137.9, 1)) == "1147.3 s, about 19 s left"
    assert timing_text(1137.9, 1_250, 25_000, since=(1137.9, 1_250)) == "1137.9 s"


@pytest.mark.slow
def test_evaluate_and_calibrate_report_their_stages(graph_path, capsys):
    assert (
        main(
            [
                "evaluate",
                "--epsilon",
                "1",
                "--graph",
                str(graph_path),
                "--sample",
                "4",
                "--releases",
                "2",
                "--no-matching-epsilon",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    for stage in (
        "evaluate: utility",
        "evaluate: adversary 4/4",
        "evaluate: key compromise",
        "evaluate: sector truncation",
        "evaluate: district truncation",
    ):
        assert stage in err, stage
    assert "\r" not in err  # no tqdm redraws in a log
    assert (
        main(
            [
                "calibrate",
                "--graph",
                str(graph_path),
                "--sample",
                "4",
                "--target",
                "median-displacement-km=1",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "calibrate: measuring epsilon values" in err and "\r" not in err
    # One total throughout, never shrinking to the count measured (a newcomer saw 9/11, 10/10).
    counts = re.findall(r"calibrate: measuring epsilon values \(at most (\d+)\) (\d+)/(\d+)", err)
    assert len(counts) >= 2 and len({(most, total) for most, _, total in counts}) == 1
    assert counts[-1][1] == counts[-1][2] == counts[0][0]
    assert (
        main(
            [
                "calibrate",
                "--graph",
                str(graph_path),
                "--sample",
                "4",
                "-q",
                "--target",
                "median-displacement-km=1",
            ]
        )
        == 0
    )
    assert capsys.readouterr().err == ""


@pytest.mark.slow  # a whole report run
def test_report_reports_its_stages(graph_path, tmp_path, capsys):
    assert (
        main(
            [
                "report",
                "--epsilon",
                "1",
                "--graph",
                str(graph_path),
                "--sample",
                "2",
                "--releases",
                "2",
                "-o",
                str(tmp_path / "r.html"),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "report: places and maps 3/3" in err and "report: attacker 2/2" in err


def test_graph_build_prints_stage_lines_off_a_terminal(capsys):
    rng = np.random.default_rng(1)
    xy = rng.uniform(0, 5000, size=(30, 2))
    labels = [f"AB1 {i % 10}{chr(65 + i // 10)}{chr(66 + i % 7)}" for i in range(30)]
    build_graph(labels, xy[:, 0], xy[:, 1], progress=True)
    lines = capsys.readouterr().err.splitlines()
    names = [
        "postcodes sorted",
        "postcodes grouped by location",
        "Delaunay triangulation",
        "long edges cut",
        "adjacency built",
        "graph assembled",
    ]
    assert [line.split(" (")[0] for line in lines] == [
        f"Building postcode graph: step {k} of 6, {name}" for k, name in enumerate(names, 1)
    ]


def test_a_releases_log_lines_estimate_from_the_rate_after_its_first_piece(monkeypatch, capsys):
    """The first piece of a release loads the compiled code and may build a table on first use
    (18 minutes on a busy machine): the time left is the rate after it, not the whole stage's."""
    import postcode_privacy._progress as progress

    clock = iter([0.0, 1000.0, 1001.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    lines = progress.CountLines(100, "releasing", prefix="perturb", unit="record")
    lines.update(1)  # the first piece, after the one-off work
    lines.update(25)
    said = capsys.readouterr().err.splitlines()
    assert said[-1] == "perturb: releasing 26/100 records (1001.0 s, about 3 s left)"
