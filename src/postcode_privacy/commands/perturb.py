"""``postcode-privacy perturb``: release a CSV or Parquet file of records (docs/release.md)."""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any

import click

from .._click_types import WholeNumbers
from .._wording import counted, verb
from ..cli import cli, echo_status
from ..release.options import click_options, pop_release_options
from ._shared_options import graph_option, ledger_secret_option, release_key_option


def resolve_key(key_path: str | None):
    """The release key: from ``--key KEYFILE``, else from $POSTCODE_PRIVACY_KEY.

    When both are given they must hold the same key: silently preferring one would re-perturb
    everyone under the other one's releases.
    """
    from ..errors import KeyFileError
    from ..keyfile import ENV_VAR, key_from_environment, read_key_file

    try:
        from_env = key_from_environment()
    except KeyFileError as exc:
        raise KeyFileError(f"${ENV_VAR}: {exc}") from None
    if key_path is None:
        if from_env is None:
            raise KeyFileError(
                f"no key: give --key KEYFILE or set ${ENV_VAR} to the key file's text"
            )
        return from_env
    key = read_key_file(key_path)
    if from_env is not None and from_env != key:
        raise KeyFileError(f"--key and ${ENV_VAR} hold different keys; give only one")
    return key


@contextlib.contextmanager
def echo_library_warnings(quiet: bool = False):
    """Print the library's warnings as ``warning: ...`` lines on stderr (after the block).

    A warning about the true records (subjects seen with two postcodes) is as private as the
    summary, whose last line says so; under ``quiet`` there is no summary, so a line after the
    warnings says it instead."""
    from ..atomic import LateSignalWarning
    from ..errors import TeleportWarning
    from ..release import DuplicateSubjectWarning

    ours = (TeleportWarning, DuplicateSubjectWarning, LateSignalWarning, _RecordsNotice)
    with warnings.catch_warnings(record=True) as caught:
        for category in ours:
            warnings.simplefilter("always", category)
        try:
            yield
        finally:
            others = []
            for item in caught:
                if issubclass(item.category, ours):
                    click.echo(f"warning: {item.message}", err=True)
                else:
                    others.append(item)
            about_records = (DuplicateSubjectWarning, _RecordsNotice)
            if quiet and any(issubclass(i.category, about_records) for i in caught):
                click.echo(
                    "  the warning above describes the true records: keep it out of published logs",
                    err=True,
                )
    for item in others:
        warnings.showwarning(item.message, item.category, item.filename, item.lineno)


class _RecordsNotice(UserWarning):
    """A line of the summary that ``-q`` must still print, about the true records."""


def warn_without_the_summary(manifest: dict, output_path: str) -> None:
    """Under ``-q`` there is no summary, but two of its lines are warnings no release may go
    without: that ``null``/``drop`` applied (the release then shows which records failed, a
    fact the guarantee does not cover: docs/release.md) and that the output holds the true
    postcodes (``--keep-source-postcode``)."""
    from ..release.manifest import read_audit

    counts = read_audit(output_path)["counts"]  # private: shown to the operator only
    if counts["failed"]:
        warnings.warn(failed_records_text(counts), _RecordsNotice, stacklevel=2)
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


def graph_loader(graph_path: str | None, progress: bool):
    """A function loading the ``--graph`` artefact, or the embedded national graph."""
    if graph_path is not None:
        from ..graph import Graph

        return lambda: Graph.load(graph_path)

    def national():
        from ..graph.national import default_graph

        return default_graph(progress=progress)

    return national


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
@click.option("--force", is_flag=True, help="Replace an existing output, manifest and audit file.")
@click.option(
    "--chunk-size",
    type=WholeNumbers(min=1),
    default=100_000,
    show_default=True,
    metavar="N",
    help="Records read, checked and written at a time (does not change the output).",
)
@click.option(
    "-q", "--quiet", is_flag=True, help="No progress bar and no summary; warnings still print."
)
@click.option(
    "--ledger",
    "ledger_location",
    metavar="PATH_OR_URL",
    help="Record the release in this privacy ledger (docs/ledger.md).",
)
@ledger_secret_option()
@click.option(
    "--budget",
    metavar="E",
    help="With --ledger: a record whose subject's cumulative spend would exceed E stops the "
    "release (nothing is written), whatever --on-error says.",
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
        with echo_library_warnings(quiet):
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
    from ..release.manifest import audit_path_for, manifest_path_for
    from .build import terminated_sidecar

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


def terminated_locations_for(terminated: str, graph_path: str | None):
    """An artefact built from ONSPD carries its source's terminated postcodes beside it."""
    if terminated == "nearest" and graph_path is not None:
        from .build import terminated_sidecar

        sidecar = terminated_sidecar(graph_path)
        if sidecar.exists():  # checked against the artefact's record once the graph is loaded
            from ..release.terminated import read_sidecar

            return read_sidecar(sidecar)
    return None


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
