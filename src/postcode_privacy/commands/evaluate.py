"""``postcode-privacy evaluate``: utility, adversary, key compromise and truncation on a sample."""

from __future__ import annotations

import click

from .._limits import EVALUATE_SAMPLE
from ..cli import cli
from ..release.options import release_option
from ._common import claim_output, echo_warnings, emit_json, load_graph
from ._shared_options import (
    force_file_option,
    graph_option,
    hops_option,
    json_output_option,
    output_file_option,
    progress_quiet_option,
    releases_option,
    sample_option,
    seed_option,
)


def _pct(x) -> str:
    from .._exact_numbers import percent  # never an untrue 0.0% or 100.0%

    return percent(x)


def _text(r: dict) -> str:
    from ..mechanism.radius import bound_text

    u, a, c = r["utility"], r["adversary"], r["key_compromise"]
    lines = [
        f"epsilon {r['epsilon']}, radius {r['radius']}, teleport bound "
        f"{bound_text(r['teleport_bound_exact'])}",
        f"graph {r['graph_sha256']} ({r['graph_postcodes']:,} postcodes); "
        f"sample {r['sample_size']} (seed {r['seed']}), releases {r['releases']}",
        "",
        "utility (exact output distributions)",
        f"  displacement: median {u['median_displacement_km']:.3f} km, "
        f"95th percentile {u['p95_displacement_km']:.3f} km",
        f"  same local authority: {_pct(u['same_local_authority_share'])}",
        f"  comes back unchanged: median {u['median_self_probability_text']}, "
        f"largest {u['max_self_probability_text']} (rounded up)",
        "",
        f"Bayesian adversary with the prior (candidates: within {a['hops']} hops of the outputs)",
        f"  {'releases seen':<30} {'identified':>12} {'median rank':>12} {'median P(truth)':>16}",
    ]
    k = r["releases"]
    for name, label in (
        ("one_release", "one"),
        ("independent_draws", f"{k} independent draws"),
        ("keyed_releases", f"{k} keyed releases"),
    ):
        s = a[name]
        lines.append(
            f"  {label:<30} {s['identified']:>6.1f} / {s['subjects']:<4} "
            f"{s['median_rank']:>12g} {s['median_posterior']:>16.3g}"
        )
    e = a["one_release_expected"]
    rate = e["identification_rate_text"]  # rounded outward from the exact range
    lines += [
        "  (each row: one simulated set of draws per sampled postcode)",
        f"  one release, expected over the draw (exact for each sampled postcode): identified "
        f"{rate}",
    ]
    lines += [
        "",
        f"key compromise: other postcodes within {c['hops']} hops mapping to the same output",
        "  "
        + ", ".join(f"{n}: {m}" for n, m in c["histogram"].items())
        + f"  (mean {c['mean_collisions']:.2f}, max {c['max_collisions']})",
    ]
    for level, t in r["truncation"].items():
        lines += [
            "",
            f"truncation to {level} (median group {t['median_group_size']:g} postcodes)",
            f"  displacement to centroid: median {t['median_displacement_km']:.3f} km, "
            f"95th percentile {t['p95_displacement_km']:.3f} km; same local authority "
            f"{_pct(t['same_local_authority_share'])}",
            f"  adversary: identified {t['identification_rate_text']}, median rank "
            f"{t['median_rank']:g}, median P(truth) {t['median_posterior']:.3g}",
        ]
        if "matching_epsilon" in t:
            matching = t["matching_epsilon"]
            note = t["matching_note"]
            if matching is None and note.startswith("not searched"):
                matching = note  # (what was not searched is not known to be "none")
            elif matching is None:  # (the note says why: the target cannot be met in range)
                matching = f"none in [0.01, 10] ({note.split('; ', 1)[-1]})"
            lines.append(f"  epsilon with the same median displacement: {matching}")
    for note in r["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def mechanism_options(command):
    """--epsilon, --graph and --radius, shared by the commands that study one mechanism."""
    for option in reversed([release_option("epsilon"), graph_option, release_option("radius")]):
        command = option(command)
    return command


@cli.command("evaluate")
@mechanism_options
@sample_option(default=EVALUATE_SAMPLE, help="Postcodes to sample (by prior, without replacement).")
@releases_option("Releases per subject for the repeated-release scenarios.")
@seed_option("Seed of the evaluation's own randomness (sample and stand-in keys).")
@hops_option(
    "--adversary-hops", "Candidate set of the adversary: postcodes within H hops of an output."
)
@hops_option(
    "--compromise-hops", "Key compromise: search the postcodes within H hops of the output."
)
@click.option(
    "--no-matching-epsilon",
    is_flag=True,
    help="Skip the search for the epsilon whose utility matches each truncation.",
)
@json_output_option("Print the machine-readable report.")
@output_file_option(
    required=False,
    help="Write the JSON report to FILE (atomically; an existing file needs --force).  With "
    "-q as well, the text summary is not printed.",
)
@force_file_option
@progress_quiet_option
def evaluate_command(
    epsilon,
    graph_path,
    radius,
    sample,
    releases,
    seed,
    adversary_hops,
    compromise_hops,
    no_matching_epsilon,
    as_json,
    output,
    force,
    quiet,
) -> None:
    """Measure what a release at epsilon gives an analyst and an adversary, on a sample.

    Utility: displacement (median, 95th percentile), same local authority, and how often a
    postcode comes back unchanged, all from exact output distributions.  A Bayesian adversary
    holding the prior: after one release, after K independent draws, and after K keyed releases
    (which must equal one release).  Key compromise: collisions of the keyed map.  Truncation to
    sector and district on the same measures.  The stand-in keys are derived from the seed and
    are not secret: this command never touches a real key.
    """
    from .._progress import stage_progress
    from ..evaluate import evaluate_release

    with claim_output(
        output, force, graph_path
    ):  # before the work: refuse early, one run at a time
        graph = load_graph(graph_path, quiet)
        with echo_warnings(), stage_progress("evaluate", quiet=quiet) as progress:
            result = evaluate_release(
                graph,
                epsilon,
                radius=radius,
                sample=sample,
                releases=releases,
                seed=seed,
                adversary_hops=adversary_hops,
                compromise_hops=compromise_hops,
                match_truncation=not no_matching_epsilon,
                progress=progress,
            )
        if output is not None:
            emit_json(result, output)
    if as_json:
        emit_json(result, None)
    elif output is None or not quiet:
        click.echo(_text(result))
