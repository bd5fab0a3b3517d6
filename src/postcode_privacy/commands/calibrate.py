"""``postcode-privacy calibrate``: the epsilon that meets a utility target on a sample."""

from __future__ import annotations

import click

from .._limits import EVALUATE_SAMPLE
from ..cli import cli
from ._common import claim_output, emit_json, load_graph
from ._shared_options import (
    force_file_option,
    graph_option,
    json_option,
    output_file_option,
    progress_quiet_option,
    sample_option,
    seed_option,
)


@cli.command("calibrate")
@click.option(
    "--target",
    "targets",
    multiple=True,
    required=True,
    metavar="NAME=VALUE",
    help="median-displacement-km=KM (at most KM) or max-self-probability=P (at most "
    "P); repeat to combine.",
)
@graph_option
@sample_option(default=EVALUATE_SAMPLE, help="Postcodes to sample (by prior, without replacement).")
@seed_option("Seed of the sample.")
@json_option
@output_file_option(
    required=False,
    help="Write the machine-readable result to FILE (atomically; an existing file needs --force).",
)
@force_file_option
@progress_quiet_option
def calibrate_command(targets, graph_path, sample, seed, as_json, output, force, quiet) -> None:
    """Find the epsilon (two significant figures, 0.01 to 10) meeting the targets on a sample.

    A displacement target sets the smallest admissible epsilon, a self-probability target the
    largest; the answer is the smallest epsilon meeting every target (the largest if only
    self-probability targets are given).  When no epsilon in range meets them it prints why
    and exits with status 1 (after the JSON, with --json; -o FILE is still written, with
    "met": false).
    """
    from .._progress import stage_progress
    from ..errors import PostcodePrivacyError
    from ..evaluate import calibrate, parse_target, select_sample
    from ..evaluate.calibrate import combine_targets
    from ..version import OUTPUT_STABILITY_VERSION, __version__

    parsed = combine_targets(parse_target(t) for t in targets)
    with claim_output(
        output, force, graph_path
    ):  # before the work: refuse early, one run at a time
        graph = load_graph(graph_path, quiet)
        nodes = select_sample(graph, sample, seed)
        with stage_progress("calibrate", quiet=quiet) as progress:
            result = calibrate(graph, parsed, nodes, progress=progress)
        data = {
            "format": "postcode-privacy-calibration",
            "format_version": 1,
            "library_version": __version__,
            "output_stability_version": OUTPUT_STABILITY_VERSION,
            "graph_sha256": graph.sha256,
            "sample_size": len(nodes),
            "seed": seed,
            **result.to_json(),
        }
        if output is not None:
            emit_json(data, output)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        emit_json(data, None)
    elif result.epsilon is not None:
        achieved = ", ".join(f"{k} {v}" for k, v in result.achieved_text.items())
        click.echo(
            f"epsilon {result.to_json()['epsilon']}  ({achieved}; sample {len(nodes)}, seed {seed})"
        )
    if result.epsilon is None:  # the warnings above say why; a script must not carry on
        raise PostcodePrivacyError(
            "no epsilon in [0.01, 10] meets the targets (see the warnings "
            "above); relax a target or use a larger --sample"
        )
