"""Command-line options several commands share, declared once.

The release options themselves (``--epsilon``, ``--radius``, ``--on-error`` ...) are declared
by :class:`~postcode_privacy.release.options.ReleaseOptions`; these are the rest: which graph,
where the output goes, and how chatty the command is.
"""

from __future__ import annotations

import click

graph_option = click.option(
    "--graph",
    "graph_path",
    metavar="ARTEFACT",
    help="Graph artefact to use instead of the embedded national graph.",
)

# For the commands that write one FILE with -o (report, evaluate, calibrate).
force_file_option = click.option(
    "--force", is_flag=True, help="Replace an existing FILE (never a key file)."
)

progress_quiet_option = click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="No progress on stderr (a bar on a terminal, stage lines otherwise).",
)


def output_file_option(*, required: bool, help: str):
    """``-o/--output FILE``: written atomically, refused if it exists without --force."""
    return click.option("-o", "--output", required=required, metavar="FILE", help=help)


def sample_option(*, default: int, help: str):
    return click.option(
        "--sample",
        type=click.IntRange(min=1),
        default=default,
        show_default=True,
        metavar="N",
        help=help,
    )


def seed_option(help: str):
    return click.option(
        "--seed", type=click.IntRange(min=0), default=0, show_default=True, metavar="S", help=help
    )


def releases_option(help: str):
    return click.option(
        "--releases",
        type=click.IntRange(min=1),
        default=20,
        show_default=True,
        metavar="K",
        help=help,
    )
