"""``postcode-privacy report``: one offline HTML page on what a release at epsilon means."""

from __future__ import annotations

import click

from .._limits import REPORT_SAMPLE
from ..cli import cli, echo_status
from ..release.options import release_option
from ._common import echo_warnings, load_graph
from ._shared_options import (
    force_file_option,
    graph_option,
    json_output_option,
    output_file_option,
    progress_quiet_option,
    releases_option,
    sample_option,
    seed_option,
)


@cli.command("report")
@release_option("epsilon", required=False, note="Not needed with --manifest.")
@click.option(
    "--manifest",
    "manifest_path",
    metavar="MANIFEST",
    help="Describe this release (its OUTPUT.manifest.json): its epsilon, radius, graph, "
    "key fingerprint and rows.",
)
@graph_option
@release_option("radius")
@click.option(
    "--postcode",
    metavar="P",
    help="Also show this postcode: its full row of figures and its own map.  The page names "
    "it: for a page to publish, choose a public place, never a subject's own postcode.",
)
@sample_option(
    default=REPORT_SAMPLE,
    help="Postcodes drawn in proportion to the graph's prior for the attacker figures and the "
    "sample summary.",
)
@releases_option("Independent releases in the repeated-release attacker figure.")
@seed_option("Seed of the sample and of the stand-in keys.")
@output_file_option(
    required=True, help="File to write (atomically; an existing file needs --force)."
)
@force_file_option
@json_output_option("Write the report's data as JSON instead of HTML.")
@progress_quiet_option
def report_command(
    epsilon,
    manifest_path,
    graph_path,
    radius,
    postcode,
    sample,
    releases,
    seed,
    output,
    force,
    as_json,
    quiet,
) -> None:
    """Write a self-contained HTML page (figures embedded) explaining a release at epsilon.

    At a glance: the attacker's chance of naming the exact postcode after one release (K
    independent releases do at least as well), against publishing the sector or district, on a
    named sample.  Then
    the guarantee in plain words and the seven conditions under which a repeated release counts
    as one; R and the teleport bound; exact displacement in a city, a town, a remote area (and
    --postcode), each with a map drawn offline from the graph's own postcode locations.
    """
    from .._environment import source_date_epoch
    from .._progress import stage_progress
    from ..atomic import OutputClaim
    from ..report import build_report, read_manifest, write_report

    source_date_epoch()  # the page's date: a malformed value is refused before any work
    if epsilon is None and manifest_path is None:
        raise click.UsageError("give --epsilon, or --manifest of a release")
    inputs = {"the manifest": manifest_path, "the graph artefact": graph_path}
    # before the work: refuse early, one run at a time, never over an input
    with OutputClaim([output], force=force, inputs=inputs):
        release = read_manifest(manifest_path) if manifest_path is not None else None
        graph = load_graph(graph_path, quiet)
        with echo_warnings(), stage_progress("report", quiet=quiet) as progress:
            result = build_report(
                graph,
                epsilon,
                radius=radius,
                postcode=postcode,
                sample=sample,
                seed=seed,
                releases=releases,
                release=release,
                progress=progress,
            )
        write_report(result, output, as_json=as_json)
    if not quiet:
        from .._input_files import visible_text

        shown = visible_text(click.format_filename(output))  # no escape sequence reaches a terminal
        echo_status(f"wrote {shown} (computed in {result.seconds} s)")
