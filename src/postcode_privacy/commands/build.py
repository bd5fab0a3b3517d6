"""``postcode-privacy build``: a graph artefact from published postcode data."""

from __future__ import annotations

import os

import click

from ..cli import cli, echo_status
from ._shared_options import force_option, max_edge_km_option, progress_quiet_option


def _refuse_output_inside(output: str, codepoint: str | None) -> None:
    """A Code-Point Open directory's files are inputs too: the artefact (or its sidecar) is
    never written among them, nor over one of them reached by a link, even with --force."""
    from .._file_kinds import same_file
    from ..errors import OutputExistsError
    from ..graph.artefact import terminated_sidecar

    if codepoint is None or not os.path.isdir(codepoint):
        return
    directory = os.path.realpath(codepoint)
    targets = [output, os.fspath(terminated_sidecar(output))]
    inside = any(
        os.path.commonpath([directory, os.path.realpath(target)]) == directory for target in targets
    )
    read = (os.path.join(root, name) for root, _, names in os.walk(codepoint) for name in names)
    if inside or any(same_file(target, path) for path in read for target in targets):
        raise OutputExistsError(
            f"the output {output} is inside the Code-Point Open directory this run reads, or "
            "one of its files by another name; choose an output elsewhere"
        )


@cli.command("build")
@click.option(
    "--onspd",
    type=click.Path(),  # (checked by its reader, as any source: exit 7, like its content)
    help="ONSPD or NSPL CSV, or the published zip.",
)
@click.option("--codepoint", type=click.Path(), help="Code-Point Open directory or zip.")
@click.option(
    "--population",
    type=click.Path(),
    help="Postcode population file (Census 2021 pcd_p001.csv, the 2011 layout, or postcode,population).",
)
@click.option(
    "--nspl",
    is_flag=True,
    help="The --onspd file is an NSPL; needed only where its header does not say (the 2025 column names).",
)
@click.option(
    "--gb-only",
    is_flag=True,
    help="Drop Northern Ireland (use for any artefact meant to be shared).",
)
@max_edge_km_option
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(),  # (a directory there is refused by the output claim: exit 8)
    metavar="FILE",
    help="Artefact to write.",
)
@force_option("Replace an existing artefact (never a key file).")
@progress_quiet_option
def build_command(
    onspd, codepoint, population, nspl, gb_only, max_edge_km, output, force, quiet
) -> None:
    """Build a graph artefact (Delaunay over postcode centroids) from ONSPD/NSPL or Code-Point Open."""
    from .._file_kinds import WRITES_GRAPH
    from ..atomic import OutputClaim, write_failure
    from ..errors import InvalidParameterError
    from ..graph.artefact import terminated_sidecar, write_graph
    from ..graph.national import build_from_sources

    if (onspd is None) == (codepoint is None):
        raise InvalidParameterError("give exactly one of --onspd and --codepoint")
    if nspl and onspd is None:
        raise InvalidParameterError("--nspl describes the --onspd file; give it with --onspd")
    sidecar = terminated_sidecar(output)
    _refuse_output_inside(output, codepoint)
    # The shared output rules (atomic.OutputClaim), for the artefact and its sidecar together:
    # checked before the build, one run at a time, never over a source this run reads or a
    # key file, and an old sidecar is replaced (or removed) only with --force.
    sources = {"the ONSPD file": onspd, "the Code-Point Open source": codepoint}
    with OutputClaim(
        [output, sidecar],
        force=force,
        inputs={**sources, "the population file": population},
        writes=WRITES_GRAPH,
    ) as claim:
        graph, table = build_from_sources(
            codepoint=codepoint,
            onspd=onspd,
            population=population,
            gb_only=gb_only,
            nspl=nspl,
            max_edge_km=max_edge_km,
            progress=not quiet,
            with_table=True,
        )
        try:
            if len(table.terminated):
                from ..release.terminated import PROVENANCE_KEY, sidecar_record

                # The sidecar shapes releases under --terminated nearest: the artefact records
                # its sha256, and perturb refuses a sidecar that does not match (docs/release.md).
                data = table.terminated.to_parquet(index=False)
                graph.provenance[PROVENANCE_KEY] = sidecar_record(
                    data, sidecar.name, table.terminated
                )
                temp = claim.temp(sidecar)
                temp.handle.write(data)
                temp.finish()
            temp = claim.temp(output)
            write_graph(graph, temp.handle)
            temp.finish()
        except OSError as exc:
            raise write_failure(exc) from None
        # both in place together; with no sidecar, a stale one is removed (--force only)
        claim.commit()
    build = graph.provenance.get("build", {})
    coverage = graph.provenance.get("population", {}).get("coverage")
    if coverage and coverage["postcodes_floored_to_1"]:
        counted = coverage["postcodes_with_population"]
        click.echo(
            f"note: --population gives a count of 1 or more to {counted:,} of the graph's "
            f"{len(graph):,} postcodes; the other {len(graph) - counted:,} have the floor of 1",
            err=True,
        )
    echo_status(f"wrote {output}")
    echo_status(f"  graph_sha256 {graph.sha256}")
    echo_status(
        f"  {len(graph):,} postcodes at {graph.n_locations:,} locations, "
        f"{graph.n_location_edges:,} location edges"
    )
    if build:
        echo_status(
            f"  edges cut {build.get('cut_edges', 0):,}, restored {build.get('restored_edges', 0):,}"
        )
    for reason, count in sorted(table.dropped.items()):
        echo_status(f"  dropped ({reason}): {count:,}")
    if len(table.terminated):
        echo_status(
            f"  terminated postcodes with coordinates kept in {sidecar.name}: {len(table.terminated):,}"
        )
