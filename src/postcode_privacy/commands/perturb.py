"""``postcode-privacy perturb``: release a CSV or Parquet file of records (docs/release.md)."""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any

import click

from .._wording import counted, verb
from ..cli import cli, echo_status
from ..release.options import click_options, pop_release_options
from ._common import (
    RecordsNotice,
    echo_warnings,
    graph_loader,
    resolve_key,
    terminated_locations_for,
)
from ._shared_options import (
    budget_option,
    chunk_size_option,
    force_option,
    graph_option,
    ledger_option,
    ledger_secret_option,
    quiet_option,
    release_key_option,
)


def warn_without_the_summary(manifest: dict, output_path: str) -> None:
    """Under ``-q`` there is no summary, but two of its lines are warnings no release may go
    without: that ``null``/``drop`` applied (the release then shows which records failed, a
    fact the guarantee does not cover: docs/release.md) and that the output holds the true
    postcodes (``--keep-source-postcode``)."""
    from ..release.manifest import read_audit

    counts = read_audit(output_path)["counts"]  # private: shown to the operator only
    if counts["failed"]:
        warnings.warn(failed_records_text(counts), RecordsNotice, stacklevel=2)
    if manifest["columns"]["source_postcode_kept"]:
        click.echo(
            "warning: NOT a release: --keep-source-postcode kept the true postcodes in the "
            "output; do not publish it",
            err=True,
        )


def failed_records_text(counts: dict) -> str:
    """The summary's line (and ``-q``'s warning) on the records ``null``/``drop`` applied to."""
    failed = counts["failed"]
    their = verb(
        failed, "its identifier or true postcode was", "their identifiers or true postcodes were"
    )
    return (
        f"{counted(failed, 'record')} could not be released: {counts['nulled']} left empty, "
        f"{counts['dropped']} dropped; the release shows which (an empty cell, a missing row), "
        f"and so that {their} missing, malformed or not in the graph: the guarantee does not "
        "cover that fact"
    )


@cli.command("perturb")
@click.argument("input_path", metavar="INPUT")
@click.option(
    "-o",
    "--output",
    "output_path",
    required=True,
    metavar="OUTPUT",
    help="Release file to write (.csv, optionally .gz, .bz2 or .xz; .parquet or .pq).  A "
    "publishable manifest is written beside it as OUTPUT.manifest.json, and a private audit "
    "file (owner-only; never publish it) as OUTPUT.audit.json.",
)
@release_key_option
@click_options
@graph_option
@force_option("Replace an existing output, manifest and audit file (never a key file).")
@chunk_size_option("Records read, checked and written at a time (does not change the output).")
@quiet_option(
    "No progress on stderr (a bar on a terminal, stage lines otherwise) and no summary; "
    "warnings still print."
)
@ledger_option(required=False, help="Record the release in this privacy ledger (docs/ledger.md).")
@ledger_secret_option()
@budget_option(
    "With --ledger: a record whose subject's cumulative spend would exceed E stops the "
    "release (nothing is written), whatever --on-error says."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="With --ledger: report what the release would record, and write none of its files "
    "(after refusing what the release would refuse before its first record; exit 3 if its "
    "records would stop it).",
)
def perturb_command(
    input_path: str,
    output_path: str,
    key_path: str | None,
    graph_path: str | None,
    force: bool,
    chunk_size: int,
    quiet: bool,
    ledger_location: str | None,
    ledger_secret: str | None,
    budget: str | None,
    dry_run: bool,
    **release_options: Any,
) -> None:
    """Release INPUT with each true postcode replaced by a perturbed real postcode.

    Every column except the true postcode is kept, in order, and the released postcode is added
    as --out-column.  Output, manifest and audit file appear only if the whole run succeeds,
    or, with --ledger, if it fails once they are complete and recorded (docs/ledger.md,
    "Atomicity").
    """
    from ..release import release_file

    options = pop_release_options(release_options)  # validated here, once
    if ledger_location is None and (budget is not None or dry_run or ledger_secret is not None):
        raise click.UsageError("--budget, --dry-run and --ledger-secret need --ledger")
    limit = None
    if budget is not None:  # checked after --epsilon and before any file, as in `ledger check`
        from ..ledger.accounting import parse_budget

        limit = parse_budget(budget)
    refusal = None if ledger_location is None else options.ledger_refusal()
    if refusal is not None:  # before the ledger opens: --dry-run is refused too
        raise click.UsageError(refusal)
    refuse_writing_over_inputs(output_path, key_path, graph_path, ledger_location, ledger_secret)
    if dry_run and ledger_location is not None:
        from ..release.files import check_release_paths
        from .ledger import echo_check, run_check

        # The preview refuses what the release itself would refuse before its first record:
        # the files above, the key, the terminated-postcode file and the ledger, then the paths.
        report = run_check(
            input_path,
            ledger_location,
            ledger_secret,
            key_path,
            options,
            graph_path,
            budget,
            chunk_size,
            before_reading=lambda: check_release_paths(
                input_path, output_path, options=options, force=force
            ),
        )
        echo_check(report, as_json=False)
        refuse_what_the_records_would_stop(report, options.on_error)
        return
    if ledger_location is not None:
        from .ledger import refuse_ledger_secret_as_key

        refuse_ledger_secret_as_key(key_path, ledger_location, ledger_secret)
    key = resolve_key(key_path)
    terminated_locations = terminated_locations_for(options.terminated, graph_path)
    with contextlib.ExitStack() as stack:
        recorder = None
        if ledger_location is not None:
            from ..ledger import Ledger, LedgerRecorder

            ledger = stack.enter_context(Ledger.open(ledger_location, ledger_secret))
            recorder = LedgerRecorder(ledger, limit)
        with echo_warnings(quiet):
            manifest = release_file(
                input_path,
                output_path,
                key=key,
                options=options,
                graph=graph_loader(graph_path, progress=not quiet),
                force=force,
                chunk_size=chunk_size,
                progress=not quiet,
                terminated_locations=terminated_locations,
                ledger=recorder,
            )
            if quiet:
                warn_without_the_summary(manifest, output_path)
    if not quiet:
        ledger_line = None
        if recorder is not None:  # (a budget refuses no record of a release that was made)
            drawn = 0 if recorder.account is None else len(recorder.account.new_draws)
            ledger_line = f"  ledger: {counted(drawn, 'new draw')} recorded"
        echo_summary(manifest, output_path, ledger_line)


def refuse_what_the_records_would_stop(report: dict, on_error: str) -> None:
    """After a dry run's preview: exit as the release would (3) if its records would stop it,
    so that ``perturb --dry-run ... && perturb ...`` never starts a release bound to fail."""
    from ..errors import InputDataError

    over = report["over_budget"]
    if over:
        raise InputDataError(
            f"the release would stop: {counted(over, 'record')} would take "
            f"{verb(over, 'its subject', 'their subjects')} over the budget (whatever "
            "--on-error says)"
        )
    if on_error == "error" and report["unreleasable"]:
        raise InputDataError(
            f"the release would stop: {counted(report['unreleasable'], 'record')} cannot be "
            "released (--on-error error; the release lists them)"
        )


def refuse_writing_over_inputs(
    output_path: str,
    key_path: str | None,
    graph_path: str | None,
    ledger_location: str | None,
    ledger_secret: str | None,
) -> None:
    """None of the three files perturb writes may be a file it reads, under any name, even with
    --force (the input itself is checked by release_file)."""
    from .._file_kinds import refuse_over_inputs
    from ..graph.artefact import terminated_sidecar
    from ..release.manifest import audit_path_for, manifest_path_for

    if Path(output_path).name in ("", ".", ".."):
        return  # not a file name at all: release_file says so
    outputs: list[str | Path] = [
        output_path,
        manifest_path_for(output_path),
        audit_path_for(output_path),
    ]
    inputs = {
        "the key file": key_path,
        "the graph artefact": graph_path,
        "the graph's terminated-postcode file": (
            None if graph_path is None else terminated_sidecar(graph_path)
        ),
        "the ledger": ledger_location,
        "the ledger's secret": ledger_secret,
    }
    refuse_over_inputs(outputs, inputs)


def echo_run_line(audit: dict, counts: dict) -> None:
    """One line on stderr: elapsed time and rate.  How far released postcodes moved is in the
    private audit file only: measured from the true postcodes, it would help anyone who saw a
    job's log to find them (docs/release.md, "The audit file")."""
    run = audit.get("run") or {}
    seconds = float(run.get("seconds") or 0.0)
    rate = counts["records"] / seconds if seconds > 0 else float("inf")
    line = (
        f"perturb: {counted(counts['records'], 'record', grouped=True)} in {seconds:.1f} s "
        f"({rate:,.0f} records/s)"
    )
    click.echo(line, err=True)


def echo_summary(manifest: dict, output_path: str, ledger_line: str | None = None) -> None:
    """The closing lines.  Their counts (and the ledger's, and the warnings and the timing
    before them) describe the true records, so the last line says so: it must come last."""
    from ..mechanism.radius import bound_text
    from ..release.manifest import audit_path_for, manifest_path_for, read_audit

    audit = read_audit(output_path)  # private: shown to the operator only
    counts = audit["counts"]
    echo_run_line(audit, counts)
    echo_status(
        f"released {counts['released']} of {counts['records']} records to "
        f"{click.format_filename(output_path)}"
    )
    if counts["failed"]:
        echo_status("  " + failed_records_text(counts))
    if counts["terminated_mapped"]:
        echo_status(
            f"  {counted(counts['terminated_mapped'], 'terminated postcode')} "
            f"{verb(counts['terminated_mapped'], 'was', 'were')} mapped to the nearest live "
            "postcode first"
        )
    echo_status(
        f"  epsilon {manifest['epsilon']}, radius {manifest['radius']}, teleport bound "
        f"{bound_text(manifest['teleport_bound']['exact'])}"
    )
    echo_status(f"  graph sha256 {manifest['graph']['sha256']}")
    echo_status(f"  key fingerprint {manifest['key_fingerprint']}")
    if manifest["columns"]["source_postcode_kept"]:
        echo_status(
            "  NOT a release: --keep-source-postcode kept the true postcodes in the output; "
            "do not publish it"
        )
        echo_status(
            f"  manifest {click.format_filename(str(manifest_path_for(output_path)))} "
            "(describes a file that must not be published)"
        )
    else:
        echo_status(
            f"  manifest {click.format_filename(str(manifest_path_for(output_path)))} (publishable)"
        )
    echo_status(
        f"  audit    {click.format_filename(str(audit_path_for(output_path)))} "
        "(private: do not publish; it also says how far postcodes moved)"
    )
    if ledger_line is not None:
        echo_status(ledger_line)
    echo_status(
        "  the lines above describe the true records (counts, warnings, timing): "
        "keep them out of published logs"
    )
