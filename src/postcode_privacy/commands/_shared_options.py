"""Command-line options several commands share, declared once.

The release options themselves (``--epsilon``, ``--radius``, ``--on-error`` ...) are declared
by :class:`~postcode_privacy.release.options.ReleaseOptions`; these are the rest: which graph,
where the output goes, how chatty the command is, and the numeric options, each with the range
in which it means something, so that an absurd value (``nan``, a negative count, a K that would
run for days) is refused by click before any work, in the option's own name.  The bounds are
the library's constants, so the command line and the Python API refuse the same values.
"""

from __future__ import annotations

import click

from .._click_types import PlainDecimals, WholeNumbers
from .._limits import DEFAULT_HOPS, DEFAULT_MAX_EDGE_KM, MAX_HOPS, MAX_RELEASES, MAX_SEED

# Ten times the length of Great Britain: a longer cut removes nothing more from a UK graph.
# (build_graph itself takes any positive length: its exactness is tested beyond this.)
MAX_EDGE_KM = 10_000.0


graph_option = click.option(
    "--graph",
    "graph_path",
    metavar="ARTEFACT",
    help="Graph artefact to use instead of the embedded national graph.",
)


def force_option(help: str):
    """``--force``: replace existing outputs (never a key file, a ledger or an input)."""
    return click.option("--force", is_flag=True, help=help)


# For the commands that write one FILE with -o (report, evaluate, calibrate).
force_file_option = force_option("Replace an existing FILE (never a key file).")


def quiet_option(help: str):
    """``-q/--quiet``: no progress (and, for some commands, no summary)."""
    return click.option("-q", "--quiet", is_flag=True, help=help)


progress_quiet_option = quiet_option(
    "No progress on stderr (a bar on a terminal, stage lines otherwise)."
)


def chunk_size_option(help: str):
    """``--chunk-size N``: records held at once; never changes an output."""
    from ..release.options import DEFAULT_CHUNK_SIZE

    return whole_number_option("--chunk-size", "N", DEFAULT_CHUNK_SIZE, 1, None, help)


def ledger_option(*, required: bool, help: str):
    """``--ledger PATH_OR_URL``: a SQLite file or a postgresql:// database (docs/ledger.md)."""
    return click.option(
        "--ledger", "ledger_location", required=required, metavar="PATH_OR_URL", help=help
    )


def budget_option(help: str):
    """``--budget E``: an exact decimal, parsed by ``ledger.accounting.parse_budget``."""
    return click.option("--budget", metavar="E", help=help)


def output_file_option(*, required: bool, help: str):
    """``-o/--output FILE``: written atomically, refused if it exists without --force."""
    return click.option("-o", "--output", required=required, metavar="FILE", help=help)


max_edge_km_option = click.option(
    "--max-edge-km",
    type=PlainDecimals(min=0, max=MAX_EDGE_KM, min_open=True),
    default=DEFAULT_MAX_EDGE_KM,
    show_default=True,
    metavar="KM",
    help="Cut longer edges; connectivity is restored with the shortest cut edges.",
)


def whole_number_option(
    flag: str, metavar: str, default: int, low: int, high: int | None, help: str
):
    """A whole-number option from ``low`` to ``high`` (None: no upper bound), plain ASCII
    digits (``_click_types.WholeNumbers``), its default shown in the help."""
    return click.option(
        flag,
        type=WholeNumbers(min=low, max=high),
        default=default,
        show_default=True,
        metavar=metavar,
        help=help,
    )


def sample_option(*, default: int, help: str):
    return whole_number_option("--sample", "N", default, 1, None, help)


def seed_option(help: str):
    return whole_number_option("--seed", "S", 0, 0, MAX_SEED, help)


def releases_option(help: str):
    return whole_number_option("--releases", "K", 20, 1, MAX_RELEASES, help)


def hops_option(name: str, help: str):
    """A hop count of a search (``--adversary-hops``): from 1 to the largest radius."""
    return whole_number_option(name, "H", DEFAULT_HOPS, 1, MAX_HOPS, help)


def ledger_secret_option(dest: str = "ledger_secret"):
    """``--ledger-secret FILE``, for every command that opens a ledger."""
    return click.option(
        "--ledger-secret",
        dest,
        metavar="FILE",
        help="The ledger's secret key file.  Default: the SQLite ledger's path with .key "
        "added (ledger.db.key); required for a PostgreSQL URL.",
    )


def json_output_option(help: str):
    """``--json``: the machine-readable result instead of text."""
    return click.option("--json", "as_json", is_flag=True, help=help)


# For the commands that print a result (calibrate, the ledger commands).
json_option = json_output_option("Print the machine-readable result (JSON).")


# For the commands that use the release key (perturb, ledger check).
release_key_option = click.option(
    "--key",
    "key_path",
    metavar="KEYFILE",
    help="Key file from `postcode-privacy keygen`.  If omitted, the key file's text is "
    "read from $POSTCODE_PRIVACY_KEY.",
)
