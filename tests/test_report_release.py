"""``report`` for a DPO: attacker figures equal to ``evaluate``'s, real offline maps with the
share outside each frame, the full row for --postcode, --manifest of an actual release (only its
publishable fields), the generation time, and the readable form of Mechanism.probabilities."""

from __future__ import annotations

import json
import re
import warnings
from fractions import Fraction

import numpy as np
import pytest
from manifests import self_consistent
from test_evaluate_graphs import postcode_graph

from postcode_privacy import Mechanism
from postcode_privacy.cli import main
from postcode_privacy.errors import InvalidParameterError
from postcode_privacy.evaluate import evaluate_release
from postcode_privacy.report import build_report, read_manifest, render_html


@pytest.fixture(scope="module")
def geo():
    graph, _ = postcode_graph(140, seed=31, colocated=5)
    return graph


@pytest.fixture(scope="module")
def report(geo):
    return build_report(geo, "0.9", postcode=geo.label(77), sample=6, seed=2, releases=3)


@pytest.mark.slow  # evaluates the attacker on the sample: several seconds
def test_attacker_rows_are_evaluates(geo, report):
    ev = evaluate_release(
        geo, "0.9", sample=6, releases=3, seed=2, compromise_sample=1, match_truncation=False
    )
    rows = {r["scenario"]: r for r in report.data["attacker"]["rows"]}
    assert list(rows) == [
        "one_release",
        "keyed_releases",
        "independent_draws",
        "sector",
        "district",
    ]
    for name in ("one_release", "keyed_releases", "independent_draws"):
        expected = ev["adversary"][name]
        for field in ("median_rank", "median_posterior"):
            assert rows[name][field] == expected[field], (name, field)
    # One release (and its keyed re-runs): the exact chance over the draw, as evaluate gives
    # it, never the one simulated draw; independent releases: evaluate's simulated figure.
    exact_one = ev["adversary"]["one_release_expected"]
    for name in ("one_release", "keyed_releases"):
        for field in ("identification_rate", "identification_rate_high", "unchanged_rate"):
            assert rows[name][field] == exact_one[field], (name, field)
        assert rows[name]["identification"].startswith("exact")
    assert exact_one["identification_rate"] > 0 and exact_one["unchanged_rate"] > 0
    independent = ev["adversary"]["independent_draws"]["identification_rate"]
    assert rows["independent_draws"]["identification_rate"] == independent
    assert rows["independent_draws"]["identification"].startswith("simulated")
    for level in ("sector", "district"):
        t = ev["truncation"][level]
        assert rows[level]["identification_rate"] == t["identification_rate"]
        assert rows[level]["median_displacement_km"] == t["median_displacement_km"]
    # Keyed re-runs are one release: the report must say so by showing equal figures.
    assert (
        rows["keyed_releases"]["identification_rate"] == rows["one_release"]["identification_rate"]
    )
    sample = report.data["sample"]
    assert sample["sample_size"] == 6 and len(sample["postcodes"]) == 6
    text = render_html(report)
    for postcode in sample["postcodes"]:
        assert postcode in text  # the report names its sample


def test_each_map_states_the_exact_share_outside_its_frame(geo, report):
    coords = geo.location_coordinates[geo.node_location]
    mechanism = Mechanism(geo, "0.9")
    for place in report.data["examples"]:
        x = geo.index_of(place["postcode"])
        half = place["map_half_width_m"]
        centre = coords[x]
        inside = np.all(np.abs(coords - centre) <= half, axis=1)
        probs = mechanism.probabilities(place["postcode"])
        # This small graph's radius covers it all, so no tail mass is left out of the ball.
        assert mechanism.teleport_probability(place["postcode"]) == 0
        outside = 1 - sum((p for p, keep in zip(probs, inside) if keep), Fraction(0))
        share = place["map_outside_share"]  # exact since format version 3
        assert Fraction(int(share["numerator"]), int(share["denominator"])) == outside
        assert half >= 1.15 * place["p95_m"]  # framed on the 95th percentile
    html = render_html(report)
    assert "falls outside it" in html and "outside the frame" in html


def test_chosen_postcode_gets_the_full_row_and_its_own_map(geo, report):
    chosen = report.data["examples"][-1]
    assert chosen["kind"] == "chosen" and chosen["postcode"] == geo.label(77)
    for field in (
        "median_m",
        "p95_m",
        "probability_within_1km",
        "self_probability",
        "teleport_probability",
        "expected_displacement_m",
    ):
        assert chosen[field] is not None
    assert chosen["map"] == "map_chosen" and report.figures["map_chosen"].startswith(b"\x89PNG")
    assert report.data["focus"] == chosen["postcode"]


def _manifest(geo, tmp_path, **changes):
    data = {
        "format": "postcode-privacy-manifest",
        "format_version": 2,
        "library_version": "0.1.0",
        "output_stability_version": "1",
        "created": "2026-01-02T03:04:05+00:00",
        "output": {"path": "records_dp.csv", "format": "csv", "sha256": "ab" * 32, "rows": 1234},
        "graph": {"sha256": geo.sha256, "nodes": len(geo)},
        "epsilon": "1.2",
        "radius": 9,
        "key_fingerprint": "0123456789abcdef",
        "columns": {
            "id": "id",
            "postcode": "postcode",
            "out": "released_postcode",
            "source_postcode_kept": False,
        },  # fmt: skip
        # Private facts a version-1 manifest still carries: the report must not show them.
        "input": {"path": "secret_input_name.csv", "sha256": "cd" * 32, "records": 987654},
        "counts": {"failed": 4242},
    }
    data.update(changes)
    data.update({k: v for k, v in self_consistent(geo, data).items() if k not in changes})
    path = tmp_path / "records_dp.csv.manifest.json"
    path.write_text(json.dumps(data))
    return path


def test_manifest_describes_that_release_and_nothing_private(geo, tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")  # 2026-01-01T00:00:00Z
    path = _manifest(geo, tmp_path)
    report = build_report(geo, release=read_manifest(path), sample=None)
    d = report.data
    assert d["epsilon"] == "1.2" and d["radius"] == 9 and d["generated"] == "2026-01-01T00:00:00Z"
    page = render_html(report)
    for shown in (
        "records_dp.csv",
        "1,234",
        "0123456789abcdef",
        "2026-01-01T00:00:00Z",
        "&epsilon; = 1.2",
        geo.sha256,
    ):
        assert shown in page, shown
    words = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)  # figures aside
    for private in ("secret_input_name", "cd" * 32, "987,654", "4,242"):
        assert private not in words and private not in json.dumps(d), private
    # Numbers cannot be searched for in a page full of exact fractions: check what was read.
    assert set(d["release"]) == {
        "epsilon",
        "radius",
        "graph_sha256",
        "key_fingerprint",
        "output_name",
        "output_rows",
        "output_sha256",
        "created",
        "library_version",
        "output_stability_version",
        "format_version",
        "on_error",
        "terminated",
    }


@pytest.mark.slow  # over 2 s (CONTRIBUTING.md, "Running the tests")
def test_a_manifests_radius_is_called_default_exactly_when_it_is(geo, tmp_path):
    """``radius_is_default`` compares the manifest's radius with the default for its epsilon;
    it was ``False`` for every manifest (a hostile review)."""
    default = Mechanism(geo, "1.2").radius
    assert Mechanism(geo, "1.2", default).default_radius == default
    assert Mechanism(geo, "1.2", default + 1).default_radius == default
    for radius, expected in ((default, True), (default + 1, False)):
        path = _manifest(geo, tmp_path, radius=radius)
        data = build_report(geo, release=read_manifest(path), sample=None).data
        assert data["radius_is_default"] is expected


def test_a_manifest_that_contradicts_itself_is_refused(geo, tmp_path):
    """A hostile review edited a real ε = 1 manifest's epsilon to 0.5, and the page stated the
    stronger guarantee; the manifest's own teleport bound still described the release.  It is
    now compared with what the graph, epsilon and radius give, exactly."""
    genuine = self_consistent(geo, {"epsilon": "1.2", "radius": 9})
    for edit in (
        {"epsilon": "0.6", "teleport_bound": genuine["teleport_bound"]},  # epsilon edited alone
        {"radius": 12, "teleport_bound": genuine["teleport_bound"]},
        {"radius": 2, "teleport_bound": genuine["teleport_bound"]},  # (a radius that warns)
        {"teleport_bound": {"exact": "1/2"}},
    ):
        with (
            pytest.raises(InvalidParameterError, match="the manifest contradicts itself"),
            warnings.catch_warnings(),
        ):
            # refused before any warning about the radius the edit gives (a review)
            warnings.simplefilter("error")
            build_report(geo, release=read_manifest(_manifest(geo, tmp_path, **edit)), sample=None)
    # The genuine one is described, and so is one whose prior is named as an earlier version
    # named a constant prior ("custom"; now "uniform"): the graph's sha256 fixes the prior.
    for prior in (genuine["prior"], "custom", "uniform"):
        assert build_report(
            geo, release=read_manifest(_manifest(geo, tmp_path, prior=prior)), sample=None
        )


def test_manifest_fields_shown_on_the_page_must_have_a_release_s_form(geo, tmp_path):
    """A hostile review put a sentence in library_version ("…; approved by the ICO"), an empty
    output name in the page's heading and a time in no zone in "release created"."""
    output = {"format": "csv", "sha256": "ab" * 32, "rows": 10}
    for bad, match in (
        ({"library_version": "0.1.0; reviewed and approved"}, "library_version is not a version"),
        ({"library_version": "0.1\u202e"}, "library_version is not a version"),
        ({"output": {**output, "path": ""}}, "output.path does not name a file"),
        ({"output": {**output, "path": "dir/"}}, "output.path does not name a file"),
        ({"output": {**output, "path": "a/b/.."}}, "output.path does not name a file"),
        ({"output": {**output, "path": "."}}, "output.path does not name a file"),
        ({"output": {**output, "path": "\t"}}, "output.path does not name a file"),
        ({"created": "2026-01-01"}, "created is not a date and time with its offset"),
        ({"created": "2026-12-08T00:45:43"}, "created is not a date and time with its offset"),
        ({"teleport_bound": {"exact": "0.5"}}, "teleport_bound.exact is not a fraction"),
        ({"teleport_bound": None}, "no field teleport_bound.exact"),
    ):
        with pytest.raises(InvalidParameterError, match=match):
            read_manifest(_manifest(geo, tmp_path, **bad))
    for good in ("0.2.0", "1.0rc1", "0.2.0.dev3+g1a2b3c"):
        assert read_manifest(_manifest(geo, tmp_path, library_version=good)).library_version == good
    moment = "2026-12-08T00:45:43-05:00"
    assert read_manifest(_manifest(geo, tmp_path, created=moment)).created == moment


@pytest.mark.slow  # a report for each refusal: two seconds
def test_manifest_refusals(geo, tmp_path, capsys):
    with pytest.raises(InvalidParameterError, match="another graph"):
        build_report(
            geo,
            release=read_manifest(
                _manifest(geo, tmp_path, graph={"sha256": "0" * 64, "nodes": len(geo)})
            ),
            sample=None,
        )
    for bad, match in (
        ({"epsilon": "abc"}, "manifest's epsilon"),
        ({"radius": 0}, "radius"),
        # (a review of round 27: Mechanism's message named no manifest; the page showed any
        # text as the fingerprint and any count of rows)
        ({"epsilon": "3", "radius": 10000}, "manifest's epsilon times its radius"),
        ({"key_fingerprint": "NO KEY - verified safe"}, "key_fingerprint is not a key"),
        ({"output": {"path": "o.csv", "format": "csv", "sha256": "ab" * 32, "rows": 10**40}},
         "output.rows is not a count"),
    ):  # fmt: skip
        with pytest.raises(InvalidParameterError, match=match) as caught:
            read_manifest(_manifest(geo, tmp_path, **bad))
        assert "--" not in str(caught.value)  # the manifest is to blame, not an option
    with pytest.raises(InvalidParameterError, match="unknown manifest format version"):
        read_manifest(_manifest(geo, tmp_path, format_version=4))
    with pytest.raises(InvalidParameterError, match="not a release manifest"):
        read_manifest(_manifest(geo, tmp_path, format="postcode-privacy-audit"))
    with pytest.raises(InvalidParameterError, match="epsilon"):
        build_report(geo, "2", release=read_manifest(_manifest(geo, tmp_path)), sample=None)
    # The same epsilon written another way is the same epsilon (exact comparison, not text).
    same = build_report(geo, "1.20", release=read_manifest(_manifest(geo, tmp_path)), sample=None)
    assert same.data["epsilon"] == "1.2"
    graph_path = tmp_path / "g.ppg"
    geo.save(graph_path)
    out = tmp_path / "r.html"
    bad = _manifest(geo, tmp_path, graph={"sha256": "f" * 64, "nodes": len(geo)})
    assert (
        main(["report", "--manifest", str(bad), "--graph", str(graph_path), "-o", str(out), "-q"])
        == 8
    )
    assert "another graph" in capsys.readouterr().err and not out.exists()
    good = _manifest(geo, tmp_path)
    assert (
        main(
            [
                "report",
                "--manifest",
                str(good),
                "--graph",
                str(graph_path),
                "-o",
                str(out),
                "-q",
                "--sample",
                "2",
                "--releases",
                "2",
            ]
        )
        == 0
    )
    assert "0123456789abcdef" in out.read_text(encoding="utf-8")


def test_every_report_shows_when_it_was_generated(report):
    assert "Report generated " + report.data["generated"] in render_html(report)
    assert report.data["generated"].endswith("Z")


def test_probabilities_print_readably_and_stay_exact(geo):
    mechanism = Mechanism(geo, "0.9")
    target = geo.label(10)
    probs = mechanism.probabilities(target)
    assert all(isinstance(p, Fraction) for p in probs) and sum(probs) == 1
    assert probs.exact == list(probs) and probs[10] == mechanism.probabilities(target).exact[10]
    text = repr(probs)
    assert "Fraction(" not in text and target in text and "hops" in text
    top = probs.rows()[0]
    assert top.probability == max(probs)
    assert f"{top.postcode}" in text.splitlines()[2]
    assert str(float(top.probability))[:6] in text.replace("E", "e")
    assert str(probs) == text


def test_a_constant_prior_is_uniform_whatever_its_value():
    """The mechanism sees only ratios of the prior, so every postcode at 5 is the uniform
    prior: the report must say what it says of a uniform prior (a reviewer found it calling
    such a graph's prior custom, and a true sentence false)."""
    from postcode_privacy.graph.build import build_graph
    from postcode_privacy.release.manifest import prior_kind

    codes = [f"LS1 {i}A{chr(65 + j)}" for i in range(1, 4) for j in range(3)]
    east = [430000.0 + 100 * (k % 3) for k in range(9)]
    north = [433000.0 + 100 * (k // 3) for k in range(9)]
    assert prior_kind(build_graph(codes, east, north)) == "uniform"
    assert prior_kind(build_graph(codes, east, north, prior=[5] * 9)) == "uniform"
    assert prior_kind(build_graph(codes, east, north, prior=[5] * 8 + [7])) == "custom"


def test_hostile_manifest_fields_are_refused_by_name(geo, tmp_path):
    """Found by a hostile review: another output-stability version was reported as this one's,
    format version 2.0 passed as 2, negative row counts were printed, and a huge integer or
    deep nesting gave a traceback."""
    for bad, match in (
        ({"output_stability_version": "99"}, "another output-stability version"),
        ({"output_stability_version": None}, "output_stability_version is not text"),
        ({"output_stability_version": 1}, "output_stability_version is not text"),
        ({"output": {"path": "a.csv", "format": "csv", "sha256": "SECRET-not-hex", "rows": 5}},
         "output.sha256 is not a SHA-256"),
        ({"graph": {"sha256": "AB" * 32}}, "graph.sha256 is not a SHA-256"),
        ({"created": "yesterday"}, "created is not a date and time"),
        ({"format_version": 2.0}, "format_version is not a version number"),
        ({"format_version": 0}, "format_version is not a version number"),
        ({"format_version": True}, "format_version is not a version number"),
        ({"format_version": "3"}, "format_version is not a version number"),
        ({"output": {"path": "a.csv", "format": "csv", "sha256": "ab" * 32, "rows": -5}},
         "output.rows is not a count"),
    ):  # fmt: skip
        with pytest.raises(InvalidParameterError, match=match):
            read_manifest(_manifest(geo, tmp_path, **bad))
    spaced = read_manifest(_manifest(geo, tmp_path, epsilon=" 1.20 "))
    assert spaced.epsilon == "1.2"  # shown as the release would have written it
    with pytest.raises(InvalidParameterError, match="NUL character"):
        read_manifest(str(tmp_path / "a\x00b"))
    path = tmp_path / "hostile.json"
    for text in ('{"radius": ' + "9" * 5000 + "}", "[" * 100_000 + "]" * 100_000):
        path.write_text(text)
        with pytest.raises(InvalidParameterError, match="not a JSON file"):
            read_manifest(path)
    assert read_manifest(_manifest(geo, tmp_path)).output_stability_version == "1"


@pytest.mark.slow  # four reports through the CLI
def test_the_same_report_twice_is_the_same_bytes(geo, tmp_path, monkeypatch):
    """With SOURCE_DATE_EPOCH fixed, nothing in the written report depends on the run (it
    printed how many seconds the computation took, in the JSON and in the page)."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    graph_path = tmp_path / "g.ppg"
    geo.save(graph_path)
    written = []
    for i, (suffix, flag) in enumerate([(".json", ["--json"])] * 2 + [(".html", [])] * 2):
        out = tmp_path / f"r{i}{suffix}"
        argv = ["report", "--epsilon", "0.9", "--graph", str(graph_path), "--sample", "3",
                "--releases", "2", "-q", "-o", str(out), *flag]  # fmt: skip
        assert main(argv) == 0
        written.append(out.read_bytes())
    assert written[0] == written[1] and written[2] == written[3]
    assert b"seconds" not in written[0]


def test_a_manifest_of_an_output_keeping_true_postcodes_is_not_reported_as_a_release(
    geo, tmp_path, capsys
):
    """``--keep-source-postcode`` writes the true postcodes beside the released ones: that file
    is not a release, and the page (a release described for publication) was made for it."""
    kept = _manifest(geo, tmp_path, columns={"id": "id", "source_postcode_kept": True})
    with pytest.raises(InvalidParameterError, match="keeps the true postcodes"):
        read_manifest(kept)
    graph_path = tmp_path / "g.ppg"
    geo.save(graph_path)
    out = tmp_path / "r.html"
    code = main(["report", "--manifest", str(kept), "--graph", str(graph_path), "-o", str(out)])
    assert code == 8 and "--keep-source-postcode" in capsys.readouterr().err
    assert not out.exists()
    odd = _manifest(geo, tmp_path, columns={"source_postcode_kept": "no"})
    with pytest.raises(InvalidParameterError, match="source_postcode_kept is not true or false"):
        read_manifest(odd)
    assert read_manifest(_manifest(geo, tmp_path)).epsilon == "1.2"
    # Every format version has the field: a manifest without it is not taken to keep none.
    for lacking in ({}, None, ["source_postcode_kept"]):
        with pytest.raises(InvalidParameterError, match="no field columns.source_postcode_kept"):
            read_manifest(_manifest(geo, tmp_path, columns=lacking))


@pytest.mark.slow  # a report and an evaluation at the largest epsilon times radius: ten seconds
def test_the_largest_epsilon_times_radius_is_written_without_a_traceback(geo, tmp_path, capsys):
    """At epsilon times radius near the old limit of 20,000 the exact teleport bound has more
    than 4,300 digits, and writing it stopped evaluate, report and perturb with Python's
    "Exceeds the limit" traceback (a hostile review of round 27).  The limit is 19,000, where
    every exact figure still fits; just above it the options are refused in the CLI's terms."""
    graph_path = tmp_path / "g.ppg"
    geo.save(graph_path)
    common = ["--epsilon", "100", "--graph", str(graph_path), "-q"]
    for command, out in (("report", "r.json"), ("evaluate", "e.json")):
        argv = [command, *common, "--radius", "190", "-o", str(tmp_path / out), "--sample", "2"]
        argv += ["--json"] if command == "report" else []
        assert main(argv) == 0, capsys.readouterr().err
        data = json.loads((tmp_path / out).read_text())
        assert "Traceback" not in capsys.readouterr().err and data
        argv[argv.index("190")] = "191"
        argv[argv.index(str(tmp_path / out))] = str(tmp_path / f"refused-{out}")
        assert main(argv) == 8
        assert "epsilon times radius above 19000" in capsys.readouterr().err


@pytest.mark.slow  # a report's maps for each policy: over 2 s each
@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({"on_error": "drop"}, "left out of this release"),
        ({"on_error": "null"}, "empty cell"),
        ({"terminated": "nearest", "on_error": "error"}, "Terminated postcodes"),
    ],
)
def test_a_release_that_leaves_records_out_or_empty_says_so(geo, tmp_path, policy, says):
    """A release made with ``--on-error drop`` or ``null`` shows, by a missing row or an empty
    cell, a fact about the record the guarantee does not cover (docs/threat-model.md); its page
    read like a clean release's (a hostile review).  The policy is in the publishable manifest."""
    page = render_html(
        build_report(geo, release=read_manifest(_manifest(geo, tmp_path, **policy)), sample=None)
    )
    assert says in page
    clean = render_html(
        build_report(
            geo,
            release=read_manifest(_manifest(geo, tmp_path, on_error="error", terminated="error")),
            sample=None,
        )
    )
    for words in ("left out of this release", "empty cell", "Terminated postcodes"):
        assert words not in clean


def test_a_policy_the_manifest_cannot_hold_is_refused_without_echo(geo, tmp_path):
    for bad in ("drop all; trust me", ["drop"], 3):
        path = _manifest(geo, tmp_path, on_error=bad)
        with pytest.raises(InvalidParameterError) as raised:
            read_manifest(path)
        assert "on_error" in str(raised.value) and "trust" not in str(raised.value)


def test_one_row_is_one_row(geo, tmp_path):
    path = _manifest(geo, tmp_path, output={"path": "r.csv", "sha256": "ab" * 32, "rows": 1})
    page = render_html(build_report(geo, release=read_manifest(path), sample=None))
    assert "1 rows" not in page and "1 row," in page


def test_a_chosen_postcode_is_said_to_be_shown_as_given(geo, report):
    """The page said nothing on it came from a release's records, whatever ``--postcode`` was
    (a subject's own, say): it now says the chosen one is shown."""
    assert "is shown, as the graph names it" in render_html(report)
    plain = build_report(geo, "0.9", sample=None)
    assert "as the graph names it" not in render_html(plain)


def test_risks_on_the_page_are_rounded_up_from_the_exact_fractions(geo, report):
    """Risk figures are rounded up, never to the nearer lower figure (a review found 9.3% printed
    for an exact 9.3103%)."""
    from postcode_privacy._exact_numbers import risk_percent

    page = render_html(report)
    for place in report.data["examples"]:
        for field in ("self_probability", "probability_within_1km"):
            exact = Fraction(int(place[field]["numerator"]), int(place[field]["denominator"]))
            text = risk_percent(place[field])
            if text.endswith("%") and not text.startswith(("less", "more")):
                assert Fraction(text[:-1]) / 100 >= exact
            assert text in page
    sample = report.data["sample"]
    assert sample["median_self_probability_text"] in page
    assert sample["max_self_probability_text"] in page
