"""Measure releases on the national graph at several epsilons (docs/choosing-epsilon.md).

Usage:  python benchmarks/evaluate_national.py [--epsilons 1,2,4]
            [--utility-epsilons 0.25,0.5,1,2,4,8] [--sample 50] [--releases 20] [--seed 0]
            [--json-out FILE] [--figure FILE] [--smoke]

Loads the national default graph (``default_graph()``: built into the cache on first use), then
for each of ``--epsilons`` runs ``evaluate_release`` (utility, the Bayesian adversary after one
release, K independent draws and K keyed releases, key compromise, truncation to sector and
district, with the epsilon matching each truncation's median displacement computed once).  For
each of ``--utility-epsilons`` it measures utility only (cheap at any epsilon, unlike the
adversary, whose cost grows with the radius) and the exact displacement at the report's three
example places (city LS1, town LA9, remote IV27).  Finally it calibrates epsilon to median
displacements of 1, 2 and 5 km.  Prints Markdown tables;
``--json-out`` keeps every number, ``--figure`` draws median displacement against epsilon for
the three places.  Everything is seeded: the same command gives the same numbers.
``--smoke`` runs one epsilon with a tiny sample on a graph of three small island areas (see
build_national.py) instead, in seconds, so the tests can check the script still runs.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time

from postcode_privacy import default_graph
from postcode_privacy.evaluate import (
    ExactMechanism,
    calibrate,
    evaluate_release,
    measure_utility,
    select_sample,
)
from postcode_privacy.evaluate.run import area_codes
from postcode_privacy.mechanism.mechanism import Mechanism
from postcode_privacy.report import example_postcodes, place_summary


def _places(graph, epsilon, examples):
    exact = ExactMechanism(Mechanism(graph, epsilon))
    out = []
    for example in examples:
        summary, _, _ = place_summary(exact, example["node"])
        out.append(
            {
                "kind": example["kind"],
                "postcode": summary["postcode"],
                "expected_m": summary["expected_displacement_m"]["approx"],
                "median_m": summary["median_m"],
                "p95_m": summary["p95_m"],
                "self_probability": summary["self_probability"]["approx"],
                "within_1km": summary["probability_within_1km"]["approx"],
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", default="1,2,4")
    parser.add_argument("--utility-epsilons", default="0.25,0.5,1,2,4,8")
    parser.add_argument("--sample", type=int, default=50)
    parser.add_argument("--releases", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-out")
    parser.add_argument("--figure")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="one epsilon, a tiny sample, a small graph: checks the script runs",
    )
    args = parser.parse_args()
    if args.smoke:
        args.epsilons, args.utility_epsilons, args.sample, args.releases = "4", "4", 4, 2
    epsilons = [e.strip() for e in args.epsilons.split(",") if e.strip()]
    utility_epsilons = [e.strip() for e in args.utility_epsilons.split(",") if e.strip()]

    started = time.perf_counter()
    graph = _smoke_graph() if args.smoke else default_graph(progress=False)
    examples = example_postcodes(graph)
    nodes = select_sample(graph, args.sample, args.seed)
    areas = area_codes(graph)
    utilities = []
    for epsilon in utility_epsilons:
        t0 = time.perf_counter()
        mechanism = Mechanism(graph, epsilon)
        summary = measure_utility(ExactMechanism(mechanism), nodes, areas.codes, areas.mass)
        utilities.append(
            {
                "epsilon": mechanism.epsilon.text,
                "radius": mechanism.radius,
                "utility": summary.to_json(),
                "places": _places(graph, epsilon, examples),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        print(f"utility at epsilon {epsilon}: {utilities[-1]['seconds']} s", flush=True)

    runs = []
    for i, epsilon in enumerate(epsilons):
        t0 = time.perf_counter()
        result = evaluate_release(
            graph,
            epsilon,
            sample=args.sample,
            releases=args.releases,
            seed=args.seed,
            match_truncation=(i == 0),
        )
        result["seconds"] = round(time.perf_counter() - t0, 1)
        runs.append(result)
        print(f"epsilon {epsilon}: {result['seconds']} s", flush=True)
    calibrations = {}
    for km in (5,) if args.smoke else (1, 2, 5):
        calibrations[str(km)] = calibrate(graph, {"median-displacement-km": km}, nodes).to_json()

    k = args.releases
    first = runs[0] if runs else None
    print()
    print(
        f"graph {graph.sha256} ({len(graph):,} postcodes); sample "
        f"{len(nodes)} drawn by prior, seed {args.seed}; {k} releases; "
        f"{platform.python_version()}, {time.perf_counter() - started:.0f} s in all"
    )
    print()
    print(
        "| epsilon | R | median km | 95th pct km | same LA | median P(unchanged) "
        "| max P(unchanged) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in utilities:
        u = r["utility"]
        share = u["same_local_authority_share"]
        print(
            f"| {r['epsilon']} | {r['radius']} | {u['median_displacement_km']:.3f} "
            f"| {u['p95_displacement_km']:.2f} | {'n/a' if share is None else f'{share:.1%}'} "
            f"| {u['median_self_probability']:.3g} | {u['max_self_probability']:.3g} |"
        )
    print()
    print(
        "| epsilon | place | postcode | expected m | median m | 95th pct m | within 1 km "
        "| P(unchanged) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in utilities:
        for p in r["places"]:
            print(
                f"| {r['epsilon']} | {p['kind']} | {p['postcode']} | {p['expected_m']:,.0f} "
                f"| {p['median_m']:,} | {p['p95_m']:,} | {p['within_1km']:.1%} "
                f"| {p['self_probability']:.3g} |"
            )
    print()
    print("| epsilon | releases seen | identified | median rank | median P(truth) |")
    print("|---|---|---|---|---|")
    for r in runs:
        a = r["adversary"]
        for name, label in (
            ("one_release", "one"),
            ("independent_draws", f"{k} independent"),
            ("keyed_releases", f"{k} keyed"),
        ):
            s = a[name]
            print(
                f"| {r['epsilon']} | {label} | {s['identified']:g} / {s['subjects']} "
                f"| {s['median_rank']:g} | {s['median_posterior']:.3g} |"
            )
    print()
    print(
        "| epsilon | other nearby postcodes mapping to the output: subjects | mean | max "
        "| postcodes searched (median) |"
    )
    print("|---|---|---|---|---|")
    for r in runs:
        c = r["key_compromise"]
        hist = ", ".join(f"{n}: {m}" for n, m in c["histogram"].items())
        print(
            f"| {r['epsilon']} | {hist} | {c['mean_collisions']:.2f} | {c['max_collisions']} "
            f"| {c['median_searched']:g} |"
        )
    print()
    print(
        "| release | median km | 95th pct km | same LA | identified | median rank "
        "| median P(truth) | matching epsilon |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for level, t in (first["truncation"] if first else {}).items():
        share = t["same_local_authority_share"]
        print(
            f"| {level} | {t['median_displacement_km']:.3f} | {t['p95_displacement_km']:.2f} "
            f"| {'n/a' if share is None else f'{share:.1%}'} "
            f"| {t['identification_rate'] * t['sample_size']:.2f} / {t['sample_size']} "
            f"| {t['median_rank']:g} | {t['median_posterior']:.3g} "
            f"| {t.get('matching_epsilon')} |"
        )
    print()
    for km, c in calibrations.items():
        print(
            f"calibrate median-displacement-km={km}: epsilon {c['epsilon']} "
            f"(achieved {c['achieved']}) {'; '.join(c['warnings'])}"
        )

    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as handle:
            json.dump(
                {"utility": utilities, "runs": runs, "calibrations": calibrations}, handle, indent=2
            )
    if args.figure:
        _figure(utilities, args.figure)


def _smoke_graph():
    from build_national import smoke_source  # this folder is on sys.path when run

    from postcode_privacy.graph.national import build_from_sources

    with tempfile.TemporaryDirectory() as workdir:
        return build_from_sources(codepoint=smoke_source(workdir))


def _figure(utilities, path) -> None:
    """Expected displacement at the three places, and the sample's median, against epsilon."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4))
    ax = fig.add_subplot()
    eps = [float(r["epsilon"]) for r in utilities]
    for i, kind in enumerate(("city", "town", "remote")):
        expected = [r["places"][i]["expected_m"] / 1000 for r in utilities]
        label = f"{kind} ({utilities[0]['places'][i]['postcode']}), expected"
        ax.plot(eps, expected, marker="o", label=label)
    medians = [
        (e, r["utility"]["median_displacement_km"])
        for e, r in zip(eps, utilities)
        if r["utility"]["median_displacement_km"] > 0
    ]
    ax.plot(
        [e for e, _ in medians],
        [m for _, m in medians],
        marker="s",
        linestyle="--",
        color="black",
        label="median over the sample",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(eps, [r["epsilon"] for r in utilities])
    ax.minorticks_off()
    ax.set_xlabel("epsilon")
    ax.set_ylabel("displacement (km)")
    ax.legend(fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    fig.savefig(path, dpi=96, bbox_inches="tight")


if __name__ == "__main__":
    main()
