"""``postcode-privacy example``: a tiny built-in demonstration that needs no data."""

from __future__ import annotations

import click

from ..cli import cli
from ..release.options import release_option


@cli.command("example")
@release_option("epsilon", required=False, default="1", show_default=True)
def example_command(epsilon: str) -> None:
    """Perturb a few postcodes on a small built-in graph with a throwaway key."""
    from ..graph import Graph
    from ..mechanism import Key, Mechanism

    codes = ["LS1 1AA", "LS1 1AB", "LS1 1AD", "LS1 1AE", "LS1 1AF", "LS1 1AG"]
    edges = list(zip(codes, codes[1:])) + [(codes[0], codes[2]), (codes[3], codes[5])]
    mechanism = Mechanism(Graph.from_edges(codes, edges), epsilon)
    key = Key.generate()
    click.echo(f"epsilon={mechanism.epsilon.text} radius={mechanism.radius} key={key.fingerprint}")
    for subject, code in enumerate(codes):
        click.echo(f"subject {subject}: {code} -> {mechanism.perturb(key, subject, code)}")
