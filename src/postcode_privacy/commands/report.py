"""``postcode-privacy report``: one offline HTML page on what a release at epsilon means."""

from __future__ import annotations

import click

from ..cli import cli, echo_status
from .evaluate import echo_warnings, load_graph, mechanism_options


@cli.command("report")
@mechanism_options
@click.option("--postcode", metavar="P",
              help="Centre the map and histogram on this postcode (default: the city example).")
@click.option("--sample", type=click.IntRange(min=1), default=None, metavar="N",
              help="Also summarise N postcodes drawn by prior (cannot be used with --postcode).")
@click.option("--seed", type=int, default=0, show_default=True, metavar="S",
              help="Seed of the --sample draw.")
@click.option("-o", "--output", required=True, metavar="FILE",
              help="File to write (atomically; an existing file needs --force).")
@click.option("--force", is_flag=True, help="Replace an existing FILE (never a key file).")
@click.option("--json", "as_json", is_flag=True,
              help="Write the report's data as JSON instead of HTML.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar while the graph loads.")
def report_command(epsilon, graph_path, radius, postcode, sample, seed, output, force, as_json,
                   quiet) -> None:
    """Write a self-contained HTML page (figures embedded) explaining a release at epsilon.

    The guarantee in plain words and the six conditions under which a repeated release counts
    as one; R and the teleport bound; exact expected displacement in a city, a town and a remote
    area; how often a postcode comes back unchanged; a map of the output distribution around
    one postcode and a histogram of displacements.
    """
    from ..atomic import OutputClaim
    from ..errors import InvalidParameterError
    from ..report import build_report, write_report

    if postcode is not None and sample is not None:
        raise InvalidParameterError("give --postcode or --sample, not both")
    with OutputClaim([output], force=force):  # before the work: refuse early, one run at a time
        graph = load_graph(graph_path, quiet)
        with echo_warnings():
            result = build_report(graph, epsilon, radius=radius, postcode=postcode,
                                  sample=sample, seed=seed)
        write_report(result, output, as_json=as_json)
    if not quiet:
        echo_status(f"wrote {click.format_filename(output)}")
