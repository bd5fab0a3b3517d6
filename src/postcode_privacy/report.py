"""What a release at a given epsilon means, for a data protection officer: one offline HTML page.

``build_report`` computes everything from the mechanism's exact integer weights (via
``evaluate.exact``); numbers become floats only when they are formatted or plotted.
``render_html`` turns the result into a single self-contained page (figures embedded as base64
PNG, no scripts, no external links), and ``write_report`` writes it, or the JSON form, atomically.

Example places.  Where the graph holds them, the report uses fixed, well-known districts: LS1
(Leeds city centre), LA9 (Kendal, a market town) and IV27 (north-west Sutherland, remote), taking
in each the postcode nearest the district's prior-weighted centroid.  Otherwise it picks by
density: the postcodes whose mean distance to their graph neighbours sits at the 5th, 50th and
99.5th percentile over all postcodes.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from . import atomic
from .errors import GraphError, OutputExistsError, PostcodePrivacyError
from .evaluate.exact import ExactMechanism, OutputDistribution
from .evaluate.run import identify_mechanism, select_sample
from .evaluate.utility import measure_utility, mixture_quantile_m
from .graph.graph import Graph
from .mechanism.mechanism import Mechanism

FORMAT = "postcode-privacy-report"
FORMAT_VERSION = 1

WELL_KNOWN = (("city", "LS1", "Leeds city centre"),
              ("town", "LA9", "Kendal, a market town"),
              ("remote", "IV27", "north-west Sutherland"))
DENSITY_PERCENTILES = (("city", 5.0), ("town", 50.0), ("remote", 99.5))

CONDITIONS = (
    ("the key", "a different key is a fresh, independent draw"),
    ("the subject identifier", "it is hashed into the draw; a new identifier is a new draw"),
    ("the true postcode", "it is hashed too: someone who moves is drawn again"),
    ("the graph artefact (its sha256)", "node order and prior feed every output"),
    ("epsilon and the radius R", "both set the weights and are hashed into the draw"),
    ("the library's output-stability version", "a new version re-draws everyone (see the changelog)"),
)


@dataclass
class Report:
    """The report's data (JSON-ready) and its figures (PNG bytes, by name)."""

    data: dict
    figures: dict[str, bytes] = field(default_factory=dict)


# -- choosing example postcodes -------------------------------------------------------------------


def _district_node(graph: Graph, district: str) -> int | None:
    labels = graph.postcodes
    prefix = district + " "
    members = [i for i, label in enumerate(labels) if label.startswith(prefix)]
    if not members or graph.location_coordinates is None:
        return None
    members = np.array(members, dtype=np.int64)
    xy = graph.location_coordinates[graph.node_location[members]]
    w = graph.prior[members].astype(np.float64)
    centre = (xy * w[:, None]).sum(axis=0) / w.sum()
    return int(members[int(np.argmin(np.hypot(*(xy - centre).T)))])


def local_spacing_m(graph: Graph) -> np.ndarray:
    """Mean distance in metres from each location to its graph neighbours (NaN if isolated)."""
    xy = graph.location_coordinates
    ip, ix = graph.loc_indptr, graph.loc_indices
    counts = np.diff(ip)
    rows = np.repeat(np.arange(graph.n_locations), counts)
    lengths = np.hypot(*(xy[rows] - xy[ix]).T)
    total = np.zeros(graph.n_locations)
    np.add.at(total, rows, lengths)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / counts


def example_postcodes(graph: Graph) -> list[dict]:
    """City, town and remote example nodes, with how each was chosen (see module docstring)."""
    if graph.location_coordinates is None:
        raise GraphError("this graph carries no coordinates, so displacements cannot be shown")
    chosen = [(kind, _district_node(graph, district), f"district {district} ({place})")
              for kind, district, place in WELL_KNOWN]
    if all(node is not None for _, node, _ in chosen):
        return [{"kind": k, "node": n, "how": h} for k, n, h in chosen]
    spacing = local_spacing_m(graph)[graph.node_location]
    spacing = np.where(np.isnan(spacing), np.inf, spacing)
    order = np.argsort(spacing, kind="stable")
    out = []
    for kind, pct in DENSITY_PERCENTILES:
        k = min(len(order) - 1, int(round(pct / 100.0 * (len(order) - 1))))
        out.append({"kind": kind, "node": int(order[k]),
                    "how": f"density: {pct:g}th percentile of distance to graph neighbours"})
    return out


# -- exact summaries -----------------------------------------------------------------------------


def _fraction_json(value: Fraction) -> dict:
    return {"numerator": str(value.numerator), "denominator": str(value.denominator),
            "approx": float(value)}


def _displacement_quantiles(exact: ExactMechanism, dist: OutputDistribution,
                            distances: np.ndarray) -> tuple[np.ndarray, dict]:
    hist = np.zeros(int(exact.max_distance_m()) + 2)
    exact.add_displacement_histogram(dist, hist, distances)
    return hist, {"median_m": mixture_quantile_m(hist, 0.5), "p95_m": mixture_quantile_m(hist, 0.95)}


def place_summary(exact: ExactMechanism, node: int) -> tuple[dict, OutputDistribution, np.ndarray]:
    """Exact displacement, self- and teleport probability of one true postcode, with its
    distribution and displacement histogram (whole metres)."""
    g = exact.graph
    dist = exact.distribution(node)
    distances = exact.distances_m(dist.location)
    expected = exact.expected_displacement_m(dist, distances)
    hist, quantiles = _displacement_quantiles(exact, dist, distances)
    within_1km = float(hist[:1000].sum())
    neighbours = g.location_neighbours(dist.location)
    xy = g.location_coordinates
    spacing = (float(np.hypot(*(xy[neighbours] - xy[dist.location]).T).mean())
               if neighbours.size else math.nan)
    summary = {
        "postcode": g.label(node),
        "expected_displacement_m": _fraction_json(expected),
        "self_probability": _fraction_json(exact.self_probability(dist)),
        "teleport_probability": _fraction_json(exact.teleport_probability(dist)),
        **quantiles,
        "probability_within_1km": within_1km,
        "neighbour_spacing_m": None if not math.isfinite(spacing) else float(spacing),
    }
    return summary, dist, hist


def build_report(graph: Graph, epsilon, radius: int | None = None, postcode: str | None = None,
                 sample: int | None = None, seed: int = 0) -> Report:
    """Everything the report shows, computed exactly; figures rendered with matplotlib (Agg)."""
    mechanism = Mechanism(graph, epsilon, radius)
    exact = ExactMechanism(mechanism)
    examples = example_postcodes(graph)
    focus_node = graph.index_of(postcode) if postcode is not None else examples[0]["node"]

    places = []
    for example in examples:
        summary, _, _ = place_summary(exact, example["node"])
        places.append({"kind": example["kind"], "chosen_by": example["how"], **summary})
    focus, focus_dist, focus_hist = place_summary(exact, focus_node)

    eps = float(mechanism.epsilon)
    ratios = []
    for h in sorted({1, 2, 3, 5, 10, mechanism.radius}):
        if h <= mechanism.radius:
            ratios.append({"hops": h, "max_ratio": _safe_exp(eps * h)})

    data = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        **identify_mechanism(mechanism),
        "radius_is_default": radius is None,
        "teleport_bound": _fraction_json(mechanism.teleport_bound),
        "likelihood_ratio_bounds": ratios,
        "conditions": [{"unchanged": a, "why": b} for a, b in CONDITIONS],
        "examples": places,
        "focus": focus,
        "sample": None,
    }
    figures = {"map": _map_figure(exact, focus_dist, focus["postcode"]),
               "histogram": _histogram_figure(focus_hist, f"true postcode {focus['postcode']}")}
    if sample is not None:
        nodes = select_sample(graph, sample, seed)
        summary = measure_utility(exact, nodes)
        data["sample"] = {"seed": int(seed), **summary.to_json()}
        figures["sample_histogram"] = _histogram_figure(
            summary.histogram_m, f"{summary.sample_size} postcodes drawn by prior (seed {seed})")
    return Report(data, figures)


def _safe_exp(x: float) -> float | None:
    try:
        return math.exp(x)
    except OverflowError:
        return None


# -- figures --------------------------------------------------------------------------------------


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    return buffer.getvalue()


def _map_figure(exact: ExactMechanism, dist: OutputDistribution, label: str) -> bytes:
    """Scatter of the ball's locations around the focus, coloured by probability."""
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    weights = exact.location_weights(dist)
    probs = np.array([float(Fraction(w, dist.normaliser)) for w in weights])
    # Show the hops that hold 99% of the ball's probability (at least 2 hops when present).
    per_hop = np.zeros(int(dist.hops.max()) + 1)
    np.add.at(per_hop, dist.hops, probs)
    cumulative = np.cumsum(per_hop) / max(per_hop.sum(), 1e-300)
    shown_hops = max(min(2, per_hop.size - 1), int(np.searchsorted(cumulative, 0.99)))
    keep = dist.hops <= shown_hops
    xy = exact.graph.location_coordinates[dist.locations[keep]]
    origin = exact.graph.location_coordinates[dist.location]
    rel = (xy - origin) / 1000.0
    p = probs[keep]
    order = np.argsort(p)
    fig = Figure(figsize=(6.4, 5.6))
    ax = fig.add_subplot()
    positive = p[order] > 0
    norm = LogNorm(vmin=max(p[p > 0].min(), 1e-12), vmax=p.max()) if (p > 0).any() else None
    sc = ax.scatter(rel[order][positive, 0], rel[order][positive, 1], c=p[order][positive],
                    s=10, cmap="viridis", norm=norm, linewidths=0)
    ax.scatter([0], [0], marker="x", s=80, c="red", label=f"true postcode {label}")
    fig.colorbar(sc, ax=ax, label="probability of being released (per location)")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("km east of the true postcode")
    ax.set_ylabel("km north of the true postcode")
    ax.set_title(f"Where {label} can be released to (within {shown_hops} hops)")
    ax.legend(loc="upper right", fontsize=8)
    return _png(fig)


def _histogram_figure(hist_m: np.ndarray, what: str) -> bytes:
    """Bars of displacement probability per distance band (up to the 99th percentile)."""
    from matplotlib.figure import Figure

    total = hist_m.sum()
    top_m = max(mixture_quantile_m(hist_m, 0.99) + 1, 10)
    width = max(1, int(math.ceil(top_m / 40)))
    edges = np.arange(0, top_m + width, width)
    cumulative = np.concatenate(([0.0], np.cumsum(hist_m)))
    upper = np.minimum(edges, hist_m.size)
    mass = np.diff(cumulative[upper]) / total
    beyond = 1.0 - cumulative[upper[-1]] / total
    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_subplot()
    ax.bar(edges[:-1] / 1000.0, mass, width=width / 1000.0, align="edge", color="#3b6ea5")
    ax.set_xlabel("displacement (km)")
    ax.set_ylabel("probability")
    ax.set_title(f"Displacement distribution: {what}")
    ax.text(0.98, 0.95, f"beyond {edges[-1] / 1000:.3g} km: {beyond:.2%}", transform=ax.transAxes,
            ha="right", va="top", fontsize=8)
    return _png(fig)


# -- HTML -----------------------------------------------------------------------------------------


def _num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "more than 10^308"
    if x == 0:
        return "0"
    if abs(x) >= 1e6 or abs(x) < 1e-3:
        mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
        return f"{mantissa} &times; 10<sup>{int(exponent)}</sup>"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _img(name: str, png: bytes, alt: str) -> str:
    encoded = base64.b64encode(png).decode("ascii")
    return (f'<figure><img id="{name}" src="data:image/png;base64,{encoded}" alt="{html.escape(alt)}">'
            f"<figcaption>{html.escape(alt)}</figcaption></figure>")


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:56rem;margin:2rem auto;
padding:0 1rem;line-height:1.5;color:#1b1b1b}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #bbb;padding:.3rem .6rem;
text-align:left;vertical-align:top}th{background:#f0f0f0}
figure{margin:1rem 0}img{max-width:100%;height:auto}figcaption{font-size:.9rem;color:#444}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.5rem 1rem}
code{font-size:.9em}details{margin:.5rem 0}.mono{font-family:monospace;word-break:break-all}
"""


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page (no scripts, no external resources)."""
    d = report.data
    e = html.escape
    eps, radius = d["epsilon"], d["radius"]
    tb = d["teleport_bound"]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>postcode-privacy report: epsilon {e(eps)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>What a release at &epsilon; = {e(eps)} means</h1>",
        f"<p>Graph <span class=\"mono\">{e(d['graph_sha256'])}</span> "
        f"({d['graph_postcodes']:,} postcodes); radius R = {radius}"
        f"{' (the default for this epsilon)' if d['radius_is_default'] else ' (chosen explicitly)'}; "
        f"postcode-privacy {e(d['library_version'])}, output-stability version "
        f"{e(d['output_stability_version'])}.</p>",
        "<h2>The guarantee, in plain words</h2>",
        "<p>Each person's postcode is replaced by another real postcode, drawn at random but "
        "weighted towards nearby ones. Distance is counted in <em>hops</em> on a graph that links "
        "each postcode to its natural neighbours, so one hop spans a few hundred metres in a city "
        "and kilometres in the countryside.</p>",
        f"<p>Take any two postcodes <em>h</em> hops apart. Whatever postcode is published, it is "
        f"at most e<sup>&epsilon;h</sup> times more likely to have come from one of them than "
        f"from the other (for <em>h</em> up to R = {radius}; further apart than R hops the bound "
        f"stays at e<sup>&epsilon;R</sup>). So an observer cannot tell close neighbours apart "
        f"with confidence, but can tell roughly where someone lives.</p>",
        "<table><tr><th>hops apart</th><th>largest likelihood ratio</th></tr>",
    ]
    for row in d["likelihood_ratio_bounds"]:
        parts.append(f"<tr><td>{row['hops']}</td><td>{_num(row['max_ratio'])}</td></tr>")
    parts += [
        "</table>",
        "<p>The output is fixed by a secret key: releasing the same data again gives the same "
        "postcodes, so repeating a release tells an observer nothing new. That holds only while "
        "<strong>all six</strong> of the following stay unchanged; change any one and the new "
        "release is a second, independent draw, and the two together leak more than either.</p>",
        "<table><tr><th>must stay unchanged</th><th>why</th></tr>",
    ]
    for c in d["conditions"]:
        parts.append(f"<tr><td>{e(c['unchanged'])}</td><td>{e(c['why'])}</td></tr>")
    parts += [
        "</table>",
        "<p class=\"note\">This protects the postcode field only. It does not hide that a record "
        "exists or what its other columns say, and anyone holding the key can undo it almost "
        "entirely: store the key as carefully as the source data.</p>",
        "<h2>The radius and the teleport bound</h2>",
        f"<p>Beyond R = {radius} hops every postcode in the country shares the same small weight. "
        f"The chance that a release lands that far away, anywhere in the country, is at most "
        f"<strong>{_num(tb['approx'])}</strong> for every postcode.</p>",
        f"<details><summary>Exact value of the bound</summary><p class=\"mono\">"
        f"{e(tb['numerator'])} / {e(tb['denominator'])}</p></details>",
        "<h2>How far postcodes move</h2>",
        "<p>Exact figures from the mechanism's output distribution (not simulation), for example "
        "postcodes in places of different density.</p>",
        "<table><tr><th>place</th><th>postcode</th><th>chosen by</th><th>expected displacement</th>"
        "<th>median</th><th>95th percentile</th><th>within 1 km</th>"
        "<th>comes back unchanged</th><th>teleport</th></tr>",
    ]
    for p in d["examples"]:
        parts.append(
            f"<tr><td>{e(p['kind'])}</td><td>{e(p['postcode'])}</td><td>{e(p['chosen_by'])}</td>"
            f"<td>{p['expected_displacement_m']['approx']:,.0f} m</td>"
            f"<td>{p['median_m']:,} m</td><td>{p['p95_m']:,} m</td>"
            f"<td>{p['probability_within_1km']:.1%}</td>"
            f"<td>{_num(p['self_probability']['approx'])}</td>"
            f"<td>{_num(p['teleport_probability']['approx'])}</td></tr>")
    parts.append("</table>")
    parts.append(
        "<p><em>Comes back unchanged</em> is the probability that the published postcode is the "
        "true one. Displacements are straight-line distances between postcode centroids; the "
        "median and 95th percentile are in whole metres.</p>")
    f = d["focus"]
    parts += [
        f"<h2>Where {e(f['postcode'])} can go</h2>",
        f"<p>Expected displacement {f['expected_displacement_m']['approx']:,.0f} m; released "
        f"unchanged with probability {_num(f['self_probability']['approx'])}.</p>",
        _img("map", report.figures["map"],
             f"Map of the output distribution around {f['postcode']}: each dot is a location "
             "that can be released, coloured by its probability"),
        _img("histogram", report.figures["histogram"],
             f"Histogram of the displacement of {f['postcode']}"),
    ]
    s = d.get("sample")
    if s:
        parts += [
            "<h2>Over a sample of postcodes</h2>",
            f"<p>{s['sample_size']} postcodes drawn by prior (seed {s['seed']}). Median displacement "
            f"{s['median_displacement_km']:.3g} km, 95th percentile {s['p95_displacement_km']:.3g} km; "
            f"median chance of coming back unchanged {_num(s['median_self_probability'])}, "
            f"largest {_num(s['max_self_probability'])}.</p>",
            _img("sample_histogram", report.figures["sample_histogram"],
                 "Histogram of displacement over the sample"),
        ]
    parts += [
        "<h2>Reading this report</h2>",
        "<p>Whether a given epsilon makes re-identification sufficiently remote for your release is "
        "a judgement for your data protection officer, taking the whole release into account. "
        "<code>postcode-privacy evaluate</code> measures what an adversary holding the population "
        "prior learns at this epsilon, and how it compares with publishing sectors or districts.</p>",
        "</body></html>",
    ]
    return "\n".join(parts)


# -- writing --------------------------------------------------------------------------------------


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then move it into place."""
    target = Path(path)
    if target.is_dir():
        raise OutputExistsError("the output path is a directory")
    try:
        atomic.write_atomic(target, data)
    except OSError as exc:
        raise PostcodePrivacyError(
            f"cannot write the output: {exc.strerror or type(exc).__name__}") from None


def write_report(report: Report, path: str | os.PathLike, as_json: bool = False) -> None:
    """Write the HTML page (or, with ``as_json``, the data as JSON) atomically."""
    if as_json:
        payload = json.dumps(report.data, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    else:
        payload = render_html(report).encode("utf-8")
    write_atomic(path, payload)
