"""``postcode-privacy demo``: the whole release flow on the shipped example file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import click

from ..cli import cli, echo_status
from ._shared_options import force_option, progress_quiet_option

EXAMPLE = "examples/records.csv"
DEMO_EPSILON = "1"


def unchanged_count(graph, true_postcodes, released_postcodes) -> int:
    """How many records were released as their own true postcode (display only).

    The median displacement is not computed here: the line prints the audit file's figure, so
    the terminal and the audit file never disagree (release/displacement.py).
    """
    return sum(
        graph.find(truth) == graph.find(released)
        for truth, released in zip(true_postcodes, released_postcodes)
        if isinstance(released, str) and released
    )


def _refuse_an_earlier_release(output: Path, *, force: bool) -> None:
    """Refuse before the graph is loaded and before the example is copied, not after, what
    ``release_file``'s claim on the release's files would refuse: an earlier release without
    ``force``, and even with it a directory, a key file or a ledger at one of their names.
    A refused ``--force`` run had already copied the example into the directory (a hostile
    review); now a refused run writes nothing."""
    from .._file_kinds import WRITES_RELEASE
    from ..atomic import OutputClaim
    from ..release.manifest import audit_path_for, manifest_path_for

    targets = [output, manifest_path_for(output), audit_path_for(output)]
    OutputClaim(targets, force=force, writes=WRITES_RELEASE).check()


def _example_bytes() -> bytes:
    from importlib import resources

    return resources.files("postcode_privacy").joinpath(EXAMPLE).read_bytes()


def _check_example_target(target: Path, *, force: bool) -> bool:
    """Whether the example records must be copied to ``target`` (False: an earlier demo's copy
    is there); refuse, before the graph loads, a file there that may not be replaced."""
    from .._file_kinds import never_replaced
    from ..errors import OutputExistsError, option

    kind = never_replaced(target)
    if kind is not None:
        raise OutputExistsError(
            f"{target.name} in the demo directory is {kind}; it is never replaced, even with "
            f"{option('force')}: choose another directory"
        )
    if os.path.lexists(target) and not force:  # (a dangling link too)
        if not target.is_symlink() and target.is_file() and target.read_bytes() == _example_bytes():
            return False
        raise OutputExistsError(
            f"{target.name} already exists in the demo directory and is not "
            f"the example file; use {option('force')} to replace it"
        )
    return True


def _make_directories(out_dir: Path, made: list[Path]) -> None:
    """Make ``out_dir`` and any missing parents, appending each directory made to ``made``
    (deepest last), so that a demo that fails can remove exactly those, and never one that
    was there (in "x/../b", b may exist and x not: a review)."""
    from ..errors import InvalidParameterError

    whole = Path(os.path.abspath(out_dir))
    missing = []
    for directory in (whole, *whole.parents):
        if os.path.lexists(directory):
            break
        missing.append(directory)
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except OSError as exc:
            raise InvalidParameterError(
                f"cannot create the output directory: {exc.strerror or type(exc).__name__}"
            ) from None
        made.append(directory)
    if not whole.is_dir():  # (a file, or a link to one, is there)
        raise InvalidParameterError("cannot create the output directory: a file has its name")


def _undo(copied_example: Path | None, made: list[Path]) -> None:
    """After a demo that failed or was stopped before its release was in place: remove the
    example it copied and the directories it made (if they are empty), so that it leaves
    nothing behind (a hostile review found the directory and the copy left by a Ctrl-C)."""
    if copied_example is not None:
        with contextlib.suppress(OSError):
            copied_example.unlink()
    for directory in reversed(made):
        try:
            directory.rmdir()  # only if empty: a release in place, or anyone's file, stays
        except OSError:
            break


def _copy_example(target: Path) -> None:
    """Put the shipped example records at ``target``, so the input sits beside its release.

    The records are invented, so leaving their true postcodes next to the released ones is what
    lets a newcomer compare the two; a real input is never copied anywhere.
    """
    from ..atomic import OutputClaim, write_atomic

    # Through a claim, as every output: never over a key file or a ledger, even with --force.
    # Not the run's last file: a stop after it has written no release.
    with OutputClaim([target], force=True, final=False):
        write_atomic(target, _example_bytes())


@cli.command("demo")
@click.option(
    "-o",
    "--output-dir",
    default="postcode-privacy-demo",
    show_default=True,
    metavar="DIR",
    help=(
        "Directory for a copy of the example input, the release, its manifest and its private "
        "audit file (created if needed)."
    ),
)
@force_option(
    "Replace an earlier demo run's release, and a records.csv in DIR that is not the example "
    "(never a key file)."
)
@progress_quiet_option
def demo_command(output_dir: str, force: bool, quiet: bool) -> None:
    """Release the shipped example records against the national graph at epsilon 1.

    The records are invented; their postcodes are real Great Britain postcodes.  A throwaway key
    is generated in a temporary directory and deleted afterwards, so the release cannot be
    reproduced: use `postcode-privacy keygen` and `postcode-privacy perturb` for real data.
    """
    import pandas as pd

    from .._environment import source_date_epoch
    from .._interrupts import files_were_in_place
    from ..errors import InvalidParameterError
    from ..graph.national import default_graph
    from ..keyfile import read_key_file, write_key_file
    from ..mechanism import Key
    from ..mechanism.epsilon import parse_epsilon
    from ..release import ReleaseOptions, release_file
    from ._common import echo_warnings

    source_date_epoch()  # the manifest's time: refused before the directory is made or filled
    if not output_dir:  # (Path("") is the current directory: "-o ''" filled it unasked)
        raise InvalidParameterError("the output directory's path is empty; give a directory")
    # (normalised: "x/../b" is the directory b, whether or not x exists, as it is undone)
    out_dir = Path(os.path.normpath(output_dir))
    output = out_dir / "records_dp.csv"
    source = out_dir / "records.csv"
    options = ReleaseOptions(
        epsilon=parse_epsilon(DEMO_EPSILON), id_column="person_id", postcode_column="postcode"
    )
    copied = False
    made: list[Path] = []  # the directories this run made, for _undo
    try:
        _make_directories(out_dir, made)
        _refuse_an_earlier_release(output, force=force)
        copy_example = _check_example_target(source, force=force)
        with echo_warnings():
            with tempfile.TemporaryDirectory(prefix="postcode-privacy-demo-") as keydir:
                key_path = Path(keydir) / "demo.key"
                write_key_file(Key.generate(), key_path)
                key = read_key_file(key_path)
            if not quiet:  # a stage line even when stderr is a log file, not a terminal
                click.echo(
                    "loading the national graph (built and cached on first use)...", err=True
                )
            graph = default_graph(progress=not quiet)
            if copy_example:
                copied = not os.path.lexists(source)  # (one --force replaced is not undone)
                _copy_example(source)
            manifest = release_file(
                source, output, key=key, options=options, graph=graph, force=force,
                progress=not quiet,
            )  # fmt: skip
    except BaseException:
        if not files_were_in_place():  # (a stop after the release's renames keeps it all)
            _undo(source if copied else None, made)
        raise
    with echo_warnings():
        # Read through open files: given a name, pandas expands "~" and fetches URLs.
        with open(source, "rb") as handle:
            truth = pd.read_csv(handle, dtype=str, keep_default_na=False)[options.postcode_column]
    with open(output, "rb") as handle:
        released = pd.read_csv(handle, dtype=str, keep_default_na=False)[options.out_column]
    same = unchanged_count(graph, truth.tolist(), released.tolist())
    from ..mechanism.radius import bound_text
    from ..release.manifest import read_audit

    audit = read_audit(output)
    counts, displacement = audit["counts"], audit["run"]["displacement_m"]
    echo_status(f"released {counts['released']} invented example records (real postcodes)")
    echo_status(
        f"  input      {click.format_filename(str(source))} (true postcodes, for comparison)"
    )
    echo_status(f"  output     {click.format_filename(str(output))}")
    echo_status(f"  manifest   {click.format_filename(str(output))}.manifest.json (publishable)")
    echo_status(f"  audit      {click.format_filename(str(output))}.audit.json (private)")
    echo_status(
        f"  epsilon    {manifest['epsilon']} per hop, radius {manifest['radius']} hops, "
        f"teleport bound {bound_text(manifest['teleport_bound']['exact'])}"
    )
    echo_status(f"  graph      {len(graph):,} postcodes, sha256 {graph.sha256}")
    median = "not measured" if displacement is None else f"{displacement['median']:,} m"
    echo_status(
        f"  median displacement {median} between true and released postcodes "
        f"(from the audit file); {same} of {counts['released']} released unchanged (input "
        "and output compared)"
    )
    echo_status("  the key was a throwaway and has been deleted: this release cannot be repeated")
