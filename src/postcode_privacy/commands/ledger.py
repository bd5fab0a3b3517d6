"""``postcode-privacy ledger``: create, inspect and preview against a privacy ledger
(docs/ledger.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from .._click_types import WholeNumbers
from .._wording import counted, verb
from ..cli import cli, echo_status
from ..release.options import ReleaseOptions, click_options, pop_release_options
from ._shared_options import (
    budget_option,
    chunk_size_option,
    graph_option,
    json_option,
    ledger_option,
    ledger_secret_option,
    release_key_option,
)


def refuse_ledger_secret_as_key(key_path: str | None, location: str, secret: str | None) -> None:
    """--key must not be the ledger's secret key file under any name (``_file_kinds.same_file``):
    one key for both would let the ledger's digests be linked to the releases (docs/ledger.md,
    "What the ledger stores").  A copy of it is refused too, once both are read
    (``LedgerRecorder.attach``)."""
    from .._file_kinds import same_file
    from ..errors import KeyFileError, PostcodePrivacyError
    from ..ledger import secret_path_for

    if key_path is None:
        return
    try:
        secret_path = secret_path_for(location, secret)
    except PostcodePrivacyError:
        return  # opening the ledger says what is wrong with --ledger-secret
    if same_file(key_path, secret_path):
        where = "--ledger-secret" if secret is not None else "the ledger's key file beside --ledger"
        raise KeyFileError(
            f"--key names the ledger's secret ({where}); a release needs a key of its own "
            "(make one with `postcode-privacy keygen`)"
        )


def open_ledger(location: str, secret: str | None):
    """For the commands that only read the ledger: read-only where it cannot be written."""
    from ..ledger import Ledger

    return Ledger.open_for_reading(location, secret)


@cli.group("ledger")
def ledger_group() -> None:
    """A privacy ledger: what each subject has spent across releases."""


@ledger_group.command("init")
@click.argument("location", metavar="PATH_OR_URL")
@ledger_secret_option("secret")
def init_command(location, secret) -> None:
    """Create an empty ledger (a SQLite file, or a postgresql:// database) and its secret."""
    from ..ledger import Ledger, secret_path_for

    Ledger.create(location, secret)
    echo_status(  # (done: a closed stdout does not make the run a failure)
        f"created ledger; its secret is in {click.format_filename(str(secret_path_for(location, secret)))}"
        " (mode 0600): keep it apart from releases and back it up"
    )


@ledger_group.command("show")
@click.argument("location", metavar="PATH_OR_URL")
@ledger_secret_option("secret")
@json_option
def show_command(location, secret, as_json) -> None:
    """Releases recorded, and the distribution of cumulative spend over subjects."""
    with open_ledger(location, secret) as ledger:
        summary = ledger.summary()
        unsettled = ledger.store.read_only and any(
            r["state"] == "pending" for r in summary["releases"]
        )
    if unsettled:
        click.echo(
            "note: the ledger cannot be written here, so releases left pending were not "
            'settled (docs/ledger.md, "Read-only media")',
            err=True,
        )
    if as_json:
        click.echo(json.dumps(_jsonable(summary), indent=2))
        return
    echo_summary(summary)


def echo_summary(summary: dict) -> None:
    from ..ledger import spend_text

    releases = summary["releases"]
    click.echo(f"{counted(len(releases), 'release')}, {counted(summary['draws'], 'distinct draw')}")
    for r in releases:
        click.echo(
            f"  #{r['id']} {r['state']:<9} {r['created']}  {shown_path(r['output'])}  epsilon "
            f"{r['epsilon']} radius {r['radius']}  graph {r['graph_sha256'][:12]}  key "
            f"{r['key_fingerprint']}  records {r['records']}, new draws {r['new_draws']}"
            + (f"  budget {spend_text(r['budget'])}" if r["budget"] is not None else "")
        )
        hand = r.get("settled_by_hand")
        if hand:
            click.echo(
                f"      settled by hand as {hand['outcome']} by {hand['settled_by']} at "
                f"{hand['settled']} on {hand['basis']}"
            )
    for label, key in (("subject", "subjects"), ("(subject, true postcode) pair", "pairs")):
        dist = summary[key]
        click.echo(f"cumulative spend per {label} ({sum(n for _, n in dist)}):")
        for value, count in dist:
            click.echo(f"  {spend_text(value):>8}  {count}")


@ledger_group.command("settle")
@click.argument("location", metavar="PATH_OR_URL")
# (a ledger's ids are SQLite integers: a larger number is no release, not a damaged ledger)
@click.argument("rid", metavar="RELEASE_ID", type=WholeNumbers(min=1, max=2**63 - 1))
@ledger_secret_option("secret")
@click.option(
    "--committed",
    is_flag=True,
    help="The release was published: needs its output at its recorded path, or --output.",
)
@click.option(
    "--abandoned",
    is_flag=True,
    help="The release was never published: its draws stop counting against budgets.",
)
@click.option(
    "--output",
    metavar="FILE",
    help="With --committed: the published output, whose sha256 must be the recorded one.",
)
@click.option("--yes", is_flag=True, help="With --abandoned: do not ask for confirmation.")
def settle_command(location, rid, secret, committed, abandoned, output, yes) -> None:
    """Settle by hand a release left pending (RELEASE_ID: the number `ledger show` prints
    after #)."""
    import sys

    from ..ledger import Ledger
    from ..ledger.settling import pending_release, settle_by_hand

    if committed == abandoned:
        raise click.UsageError("give exactly one of --committed and --abandoned")
    if output is not None and not committed:
        raise click.UsageError("--output is evidence for --committed only")
    if yes and not abandoned:
        raise click.UsageError("--yes is for --abandoned only")
    if abandoned and not yes and not sys.stdin.isatty():
        raise click.UsageError("--abandoned needs --yes when standard input is not a terminal")
    with Ledger.open(location, secret) as ledger:
        if abandoned and not yes:
            shown = pending_release(ledger, rid)
            click.echo(
                f"release #{rid}: {shown_path(shown['output'])}, recorded {shown['created']} by "
                f"{shown['owner']}, {counted(shown['records'], 'record')}, epsilon "
                f"{shown['epsilon']}"
            )
            click.confirm(
                "Abandon it? Its draws will stop counting against budgets; if its files were "
                "published after all, every budget then under-counts",
                abort=True,
            )
        done = settle_by_hand(ledger, rid, "committed" if committed else "abandoned", output=output)
    echo_status(f"release #{rid} settled by hand as {done['outcome']} on {done['basis']}")


@ledger_group.command("check")
@click.argument("input_path", metavar="INPUT")
@ledger_option(required=True, help="The ledger.")
@ledger_secret_option("secret")
@release_key_option
@click_options(only=("epsilon", "id_column", "postcode_column", "radius", "terminated"))
@graph_option
@budget_option("Also count records this budget would refuse.")
@chunk_size_option("Records read and checked at a time (does not change the result).")
@json_option
def check_command(
    input_path: str,
    ledger_location: str,
    secret: str | None,
    key_path: str | None,
    graph_path: str | None,
    budget: str | None,
    chunk_size: int,
    as_json: bool,
    **release_options: Any,
) -> None:
    """Preview a release of INPUT against the ledger, without making it."""
    options = pop_release_options(release_options)
    report = run_check(
        input_path, ledger_location, secret, key_path, options, graph_path, budget, chunk_size
    )
    echo_check(report, as_json)


def run_check(
    input_path: str,
    location: str,
    secret: str | None,
    key_path: str | None,
    options: ReleaseOptions,
    graph_path: str | None,
    budget: str | None,
    chunk_size: int,
    before_reading: Callable[[], None] | None = None,
) -> dict:
    """The ledger preview of a release with ``options`` (its error policy is the ledger's own:
    a record that cannot be released is counted, not an error).  ``before_reading`` (for
    ``perturb --dry-run``) makes the preview the release's: the ledger is opened as the release
    opens it, for writing, and the release's own checks run once the key, the terminated-postcode
    file and the ledger have passed."""
    from ..ledger import Ledger, check_release, parse_budget
    from ..release.files import refuse_unrecordable_input_name
    from ._common import graph_loader, resolve_key, terminated_locations_for

    limit = None if budget is None else parse_budget(budget)  # after --epsilon, before any file
    refuse_unrecordable_input_name(input_path)  # (the release it previews would refuse it)
    refuse_ledger_secret_as_key(key_path, location, secret)
    key = resolve_key(key_path)
    terminated = terminated_locations_for(options.terminated, graph_path)  # as perturb: first
    opened = open_ledger if before_reading is None else Ledger.open
    with opened(location, secret) as ledger:
        if before_reading is not None:
            before_reading()
        return check_release(
            ledger,
            input_path,
            key=key,
            graph=graph_loader(graph_path, False),
            options=options,
            terminated_locations=terminated,
            budget=limit,
            chunk_size=chunk_size,
        )


def echo_check(report: dict, as_json: bool) -> None:
    from ..ledger import spend_text

    if as_json:
        click.echo(json.dumps(_jsonable(report), indent=2))
        return
    click.echo(
        f"{counted(report['records'], 'record')}, {report['releasable']} passing the record checks:"
    )
    repeats = report["repeats"]
    click.echo(
        f"  {repeats} {verb(repeats, 'repeats', 'repeat')} a draw already in the ledger "
        "(cost nothing)"
    )
    again = report["new_draws_of_known_subjects"]
    click.echo(
        f"  {again} {verb(again, 'is a new draw', 'are new draws')} of "
        f"{counted(report['known_subjects_drawn_again'], 'subject')} already in the ledger"
    )
    new = report["new_subjects_records"]
    click.echo(
        f"  {new} {verb(new, 'belongs', 'belong')} to "
        f"{counted(report['new_subjects'], 'new subject')}"
    )
    if report["over_budget"]:
        click.echo(
            f"  {report['over_budget']} would be refused by the budget, which stops the "
            "release whatever --on-error says"
        )
    if report["unreleasable"]:
        click.echo(f"  {report['unreleasable']} cannot be released at all (the release lists them)")
    if report["spend_after_known"]:
        click.echo("cumulative spend after this release, subjects already in the ledger:")
        for value, count in report["spend_after_known"]:
            click.echo(f"  {spend_text(value):>8}  {count}")


def shown_path(recorded: str) -> str:
    """A release's recorded output path as the operator would type it here: relative to the
    current directory when the file lies under it, absolute otherwise; control and direction
    characters made visible (a directory's name must not forge a line of the listing)."""
    import os

    from .._file_names import path_of_text
    from .._input_files import visible_text

    path = path_of_text(recorded)  # (recorded as UTF-8 text; this locale may read names otherwise)
    try:
        relative = os.path.relpath(path)
    except (ValueError, OSError):  # (another drive, on Windows; the current directory removed)
        relative = path
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        relative = path
    return visible_text(click.format_filename(relative))


def _jsonable(value):
    from fractions import Fraction

    from ..ledger import spend_text

    if isinstance(value, Fraction):  # a budget: the exact text ``ledger show`` prints
        return spend_text(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and isinstance(value[0], Fraction):
            return {"spend": spend_text(value[0]), "count": value[1]}
        return [_jsonable(v) for v in value]
    return value
