"""File-to-file release: the workflow behind ``postcode-privacy perturb``.

Guarantees (docs/release.md, "Nothing is lost"):

* the input is only ever opened for reading, and its SHA-256 is taken before and after the run,
  so an input that changes underneath the release fails it;
* the output, its publishable manifest and its private audit file (``manifest.py``) are claimed
  before any work (:class:`~postcode_privacy.atomic.OutputClaim`): their names are checked, an
  existing one is refused without ``force`` (a key file always), and a lock keeps a second run
  from writing the same output at the same time;
* they are written to temporary files in the output's own directory and moved into place
  together only when everything has succeeded, audit file and manifest before the output, with
  the stop signals (SIGINT, SIGTERM, SIGHUP) held back during the renames, so an output
  never exists without the files that describe it; on any error or interruption the temporary
  files are removed, so a failed run leaves nothing behind and never a partial output;
* the output may not be the input (same path or same file);
* with ``on_error="error"`` every chunk is checked before anything is perturbed, and one failing
  record anywhere means no output at all.

Memory is bounded by two chunks (the one being drawn and the one being checked or written)
plus 16 bytes per distinct subject identifier (the duplicate-subject check), whatever the
length of the file.  The two overlap only in time: chunks are checked, drawn and written in
input order, and each output is what ``ReleasePlan.process_chunk`` gives chunk by chunk.
Under ``on_error="error"`` without a ledger, the check pass also keeps each accepted record's
identifier and node compactly (about 50 bytes and the identifier, for at most 10 million
records; ``draw_ahead.py``) and notes its subjects, so that a file of several chunks is
drawn in one batch between the check pass and the writing pass, which then only attaches the
outputs to the records it reads again; past those limits it is drawn chunk by chunk as above.
The outputs are the same either way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pandas as pd

from .._digest import sha256_of_file
from .._environment import source_date_epoch
from .._file_kinds import WRITES_RELEASE, same_file
from .._file_names import LEDGER_PATH_NOT_UTF8, OUTPUT_NAME_NOT_UTF8, name_text
from .._progress import count_bar
from ..atomic import OutputClaim, refuse_directory_path, write_failure
from ..engine.batch import prepare_in_background
from ..engine.landmarks import warm_up_in_background
from ..engine.profiles import load_in_background
from ..errors import InputDataError, InvalidParameterError, OutputExistsError
from ..graph.graph import Graph
from ..mechanism import Key
from .csv_lines import record_lines
from .displacement import Displacement
from .draw_ahead import DrawAhead
from .formats import table_format
from .manifest import (
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    audit_path_for,
    build_audit,
    build_manifest,
    encode,
    manifest_path_for,
)
from .options import DEFAULT_CHUNK_SIZE, ReleaseOptions
from .plan import PendingChunk, ReleasePlan
from .reader import (
    TableReader,
    missing_input_message,
    read_failure,
    refuse_columns_csv_cannot_hold,
)
from .records import (
    COUNT_KEYS,
    ChunkCheck,
    OverBudgetError,
    failure_error,
    merge_counts,
    over_budget_error,
)
from .writers import open_writer, uncompressed_sha256, written_with


@runtime_checkable
class LedgerHooks(Protocol):
    """What a release asks of the ledger that records it: a
    :class:`~postcode_privacy.ledger.LedgerRecorder`.  (Named here, as a protocol: the
    ledger is a later layer, which imports the release, never the reverse.)"""

    @property
    def budget(self) -> Any: ...

    def attach(self, plan: ReleasePlan) -> object: ...
    def spent_meanwhile(self) -> Exception: ...
    def prepare(self, output_path: str | os.PathLike, output_sha256: str) -> None: ...
    def commit(self) -> None: ...
    def finish(self, *, wait: bool = True) -> None: ...


__all__ = [
    "release_file",
    "check_release_paths",
    "refuse_unrecordable_input_name",
    "manifest_path_for",
    "audit_path_for",
    "MANIFEST_FORMAT",
    "MANIFEST_VERSION",
    "DEFAULT_CHUNK_SIZE",
]


def _lines_of(path: Path, check: ChunkCheck, checked_sha256: str) -> dict[int, int] | None:
    """The file line of each record ``check`` lists (``record_lines``), if the file read again
    is still the one checked: lines found in another file could be wrong ones."""
    listed = [row for row, _ in check.row_errors + check.budget_errors]
    lines = record_lines(path, listed, check.counts["records"])
    try:
        unchanged = sha256_of_file(path) == checked_sha256
    except OSError:
        unchanged = False
    return lines if unchanged else None


def _input_sha256(path: Path) -> str:
    """The input's SHA-256; an input that cannot be read (gone, say) is the input's error."""
    try:
        return sha256_of_file(path)
    except OSError as exc:
        raise InputDataError(read_failure(str(path), exc)) from None


def _bar(progress: bool, total: int | None, desc: str):
    """Feedback for one pass over the records (``_progress.count_bar``)."""
    return count_bar(progress, total, desc, prefix="perturb")


def _no_records(reader: TableReader) -> InputDataError:
    if reader.format == "csv":
        return InputDataError("the input has a header but no records")
    return InputDataError("the input has no records")


def release_file(
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    key: Key,
    graph: Graph | Callable[[], Graph] | None = None,
    options: ReleaseOptions | None = None,
    force: bool = False,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    progress: bool = False,
    terminated_locations: pd.DataFrame | None = None,
    ledger: LedgerHooks | None = None,
    **option_kwargs: Any,
) -> dict:
    """Release ``input_path`` to ``output_path`` and write ``OUTPUT.manifest.json``; return the
    manifest.

    The release options are a :class:`ReleaseOptions` given as ``options=``, or its fields as
    keywords (as for :func:`~postcode_privacy.perturb_frame`); they are validated before any
    file is touched.  Also ``force`` (replace an existing output and manifest), ``chunk_size``
    (records held in memory at once; the output does not depend on it) and ``progress``
    (feedback on stderr: tqdm bars moving per engine batch on a terminal, plain stage lines
    otherwise).  ``graph=None`` loads the embedded national graph, after the cheap checks
    on paths, options and columns.  ``ledger`` (a :class:`~postcode_privacy.ledger.LedgerRecorder`)
    screens records against a budget and records the release, atomically with its files
    (docs/ledger.md).
    """
    if ledger is not None and not isinstance(ledger, LedgerHooks):  # (a path, say)
        raise TypeError(
            "ledger must be a postcode_privacy.ledger.LedgerRecorder (made from an open "
            "Ledger), not " + type(ledger).__name__
        )
    options = ReleaseOptions.build(options, **option_kwargs)
    refusal = None if ledger is None else options.ledger_refusal()
    if refusal is not None:
        raise InvalidParameterError(refusal)
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidParameterError("chunk_size must be a whole number of at least 1")
    input_path, output_path, targets = _checked_paths(
        input_path, output_path, recorded=ledger is not None
    )
    manifest_path = targets[1]
    claim = OutputClaim(targets, force=force, writes=WRITES_RELEASE)
    with claim:
        return _release(
            claim,
            input_path,
            output_path,
            manifest_path,
            key=key,
            options=options,
            graph=graph,
            chunk_size=chunk_size,
            progress=progress,
            terminated_locations=terminated_locations,
            ledger=ledger,
        )


def _refuse_a_path_no_ledger_records(output_path: str | os.PathLike) -> None:
    """A ledger records the output's whole path as text: one whose directories' names are not
    UTF-8 (bytes a file system allows) cannot be recorded, and the write failed late, called
    a damaged ledger."""
    try:
        whole = os.path.abspath(output_path)
    except OSError:  # (the current directory removed: the output's own checks say so)
        return
    if name_text(os.path.basename(whole)) is None:
        raise InvalidParameterError(OUTPUT_NAME_NOT_UTF8)
    if name_text(whole) is None:
        raise InvalidParameterError(LEDGER_PATH_NOT_UTF8)


def refuse_unrecordable_input_name(input_path: str | os.PathLike) -> None:
    """The audit file records the input's name as UTF-8 text (_file_names.py): one whose bytes
    are not UTF-8 is refused before any work, by the release and by its previews alike."""
    if name_text(os.path.basename(os.fspath(input_path))) is None:
        raise InvalidParameterError("the input file name is not valid UTF-8 text; rename it")


def check_release_paths(
    input_path: str | os.PathLike,
    output_path: str | os.PathLike,
    *,
    options: ReleaseOptions,
    force: bool = False,
) -> None:
    """Refuse what :func:`release_file` would refuse of its paths and columns before reading a
    record, without claiming or writing anything: for a preview (``perturb --dry-run``), whose
    answer must not be "all passes" for a release that would stop at once.  For a Parquet
    input released to CSV that means reading every record, as the release's check pass does:
    a cell with no CSV text (a timestamp past year 9999 in its zone) stops the release.  The
    input's records themselves are the preview's to judge."""
    # (a preview is always a ledger's)
    input_path, output_path, targets = _checked_paths(input_path, output_path, recorded=True)
    OutputClaim(targets, force=force, writes=WRITES_RELEASE).check()
    reader = TableReader(input_path, DEFAULT_CHUNK_SIZE)
    _check_columns(reader, options, output_path)
    if table_format(output_path) == "csv" and reader.format != "csv":
        for _ in reader.chunks():  # (a CSV input holds only text, which always has CSV text)
            pass


def _checked_paths(
    input_path: str | os.PathLike, output_path: str | os.PathLike, *, recorded: bool
) -> tuple[Path, Path, list[Path]]:
    """The input, the output and the three files a release writes (output, manifest, audit
    file), once the paths pass the checks made before any file is claimed: the input is a file
    of a known format, and the output has a known format and names neither a directory nor the
    input (the output's names are then the claim's to check).  First, what would stop the
    release at its end: a malformed ``$SOURCE_DATE_EPOCH`` (the manifest's time) and, for a
    release a ledger records (``recorded``), an output path it cannot record."""
    source_date_epoch()
    if recorded:
        _refuse_a_path_no_ledger_records(output_path)
    # As given, before Path drops a trailing "/" (``in.csv/`` is not the file ``in.csv``).
    refuse_directory_path(input_path, "input", InputDataError)
    refuse_directory_path(output_path)
    given_input = input_path
    input_path, output_path = Path(input_path), Path(output_path)
    refuse_unrecordable_input_name(input_path)
    if not input_path.exists():
        raise InputDataError(missing_input_message(given_input))
    if not input_path.is_file():
        raise InputDataError("the input is not a regular file")
    table_format(input_path, "input")
    if os.path.isdir(output_path):  # before its format: "-o results" meant "into results"
        raise InvalidParameterError(f"the output path {output_path} is a directory")
    table_format(output_path, "output")
    targets = [output_path, manifest_path_for(output_path), audit_path_for(output_path)]
    if any(same_file(input_path, target) for target in targets):
        raise OutputExistsError("refusing to write over the input file; choose another output")
    return input_path, output_path, targets


def _check_columns(reader: TableReader, options: ReleaseOptions, output_path: Path) -> None:
    """Cheap column checks before the graph is loaded (the plan repeats them on every chunk);
    for a CSV output, refuse kept columns with no CSV text, and have the reader refuse such a
    cell as it reads it (``TableReader.refuse_values_csv_cannot_show``)."""
    reader.check_columns(options)
    if table_format(output_path) == "csv":
        kept = options.output_columns(reader.columns)
        refuse_columns_csv_cannot_hold(reader.arrow_schema, kept)
        reader.refuse_values_csv_cannot_show(kept)


# The fewest bytes of a CSV line whose record has a postcode: five characters (the shortest
# postcode without its space) and the line's end.
_FEWEST_POSTCODE_LINE_BYTES = 6


def _postcodes_at_most(reader: TableReader) -> int | None:
    """At most how many distinct postcodes the input holds, known without reading it: a
    Parquet file's row count, an uncompressed CSV file's size over the fewest bytes of a
    line with a postcode; None (no bound) for a compressed CSV file."""
    if reader.num_rows is not None:
        return reader.num_rows
    if reader.path.lower().endswith(".csv"):
        return os.path.getsize(reader.path) // _FEWEST_POSTCODE_LINE_BYTES
    return None


def _released_chunks(
    plan: ReleasePlan,
    chunks: Iterable[pd.DataFrame],
    progress: Callable[[int], None],
    first: PendingChunk | None,
) -> Generator[tuple[pd.DataFrame, dict[str, int]], None, None]:
    """``plan.process_chunk`` of each of the input's ``chunks`` in order, overlapped: while
    the engine's workers draw one chunk, this process reads and checks the next, then builds
    and hands back the one before (the caller writes it).  The outputs are those of calling
    ``process_chunk`` chunk by chunk; only the waiting is shorter.  ``first``, if given, is
    the first chunk as the check pass left it, released without checking it again.
    ``progress`` moves as the engine finishes each batch, not once per chunk."""
    drawing: PendingChunk | None = None
    ready: PendingChunk | None = None
    try:
        offset = 0
        for chunk in chunks:
            if offset == 0 and first is not None:
                ready = first
            else:
                ready = plan.prepare_chunk(chunk, offset)  # while the workers draw ``drawing``
            offset += len(chunk)
            if drawing is not None:
                drawing.wait()  # its workers are gone: the next chunk's may start
            ready.start(progress)
            finished, drawing, ready = drawing, ready, None
            if finished is not None:  # built and written while ``drawing`` is drawn
                yield plan.finish_chunk(finished, warn=False, progress=progress)
                finished = None  # written: not kept while the next chunk is checked
        if drawing is not None:
            finished, drawing = drawing, None
            yield plan.finish_chunk(finished, warn=False, progress=progress)
    finally:  # an error or an interruption: stop any workers (also if ``ready`` just started)
        for pending in (drawing, ready):
            if pending is not None:
                pending.cancel()


@dataclass
class _CheckPass:
    """What the check pass leaves the writing pass: the first chunk as checked (not read
    again when it is the only one), the whole file's draws when it was kept (``DrawAhead``),
    the chunks read and the records to write."""

    total: int | None
    first: PendingChunk | None = None
    ahead: DrawAhead | None = None
    chunks: int = 0


def _check_pass(
    plan: ReleasePlan, reader: TableReader, input_path: Path, input_sha256: str, progress: bool
) -> _CheckPass:
    """Check every record before anything is drawn or written: one failing record (under
    ``on_error="error"``) or one a budget refuses stops the release, naming the records."""
    check = ChunkCheck()
    first = None
    chunks = 0
    # The check pass reads every record anyway: it keeps what the engine needs, so that the
    # whole file is drawn in one batch (release/draw_ahead.py), unless a ledger screens the
    # release (the screen must see the release pass chunk by chunk).  A file of one chunk is
    # one batch already: it is kept only from a second chunk on.
    ahead = DrawAhead(plan) if plan.screen is None else None
    with _bar(progress, reader.num_rows, "checking") as bar:
        offset = 0
        for chunk in reader.chunks():
            checked = plan.checked_chunk(chunk, offset)
            check.merge(checked.checked.check)
            chunks += 1
            if ahead is not None and chunks > 1 and not check.failed:
                if chunks == 2:  # (a failure anywhere: no release at all)
                    assert first is not None  # kept below when no ledger screens
                    ahead.add(first)
                ahead.add(checked)
            # The release pass starts from the first chunk as checked here, unless a ledger
            # screens it: the screen must see the release pass from its start.
            if offset == 0 and plan.screen is None:
                first = checked
            offset += len(chunk)
            bar.update(len(chunk))
    if check.counts["records"] == 0:
        raise _no_records(reader)
    refused = plan.on_error == "error" and check.failed
    if refused or check.counts["over_budget"]:
        lines = None
        if reader.format == "csv":
            lines = _lines_of(input_path, check, input_sha256)
        if refused:
            raise failure_error(check.row_errors, check.counts, lines, terminated=plan.terminated)
        raise over_budget_error(check, lines)
    if ahead is not None and (ahead.abandoned or chunks < 2):
        ahead = None  # over the limits, or one chunk: drawn chunk by chunk
    if ahead is not None:
        first = None  # the writing pass reads every chunk again
        with _bar(progress, ahead.records, "drawing") as bar:
            ahead.draw(bar.update)
    return _CheckPass(check.counts["records"], first, ahead, chunks)


def _write_descriptions(
    claim: OutputClaim,
    plan: ReleasePlan,
    reader: TableReader,
    output_path: Path,
    manifest_path: Path,
    written: Path,
    *,
    input_path: Path,
    input_sha256: str,
    counts: dict,
    started: float,
) -> dict:
    """Write the publishable manifest and the private audit file of the output ``written``
    (as temporary files of ``claim``); return the manifest.  ``started``: the release's start
    on ``time.perf_counter``, for the audit file's run time."""
    assert plan.displacement is not None  # (set by _release, for this audit file)
    manifest = build_manifest(
        plan.describe(),
        output_path=output_path,
        output_format=table_format(output_path),
        output_sha256=sha256_of_file(written),
        rows=counts["rows_out"],
        written_with=written_with(output_path.name, reader.arrow_schema),
        uncompressed_sha256=uncompressed_sha256(written, output_path.name),
    )
    audit = build_audit(
        manifest,
        input_path=input_path,
        input_format=reader.format,
        input_sha256=input_sha256,
        counts=counts,
        run={
            "seconds": round(time.perf_counter() - started, 3),
            "displacement_m": plan.displacement.summary(),
        },
    )
    # Beside a file that keeps the true postcodes, the manifest's sha256 of that file is a
    # digest of them: no longer publishable, so as private as the file.
    man_tmp = claim.temp(manifest_path, private=plan.keep_source_postcode)
    man_tmp.handle.write(encode(manifest))
    man_tmp.finish()
    audit_tmp = claim.temp(audit_path_for(output_path), private=True)  # owner-only from birth
    audit_tmp.handle.write(encode(audit))
    audit_tmp.finish()
    return manifest


def _release(
    claim: OutputClaim,
    input_path: Path,
    output_path: Path,
    manifest_path: Path,
    *,
    key: Key,
    options: ReleaseOptions,
    graph,
    chunk_size: int,
    progress: bool,
    terminated_locations,
    ledger,
) -> dict:
    """The work of :func:`release_file`, inside its claim on the output's names."""
    started = time.perf_counter()
    warm_up_in_background()  # the engine's compiled code loads while the graph does
    reader = TableReader(input_path, chunk_size)
    _check_columns(reader, options, output_path)

    writer = None
    stopped = False  # a stop signal ended the run (the ledger is then settled without waiting)
    try:
        # A file that keeps the true postcodes is as private as the input: owner-only from birth.
        out_tmp = claim.temp(output_path, private=options.keep_source_postcode)
        plan = ReleasePlan(
            key=key, options=options, graph=graph, terminated_locations=terminated_locations
        )
        if ledger is not None:
            ledger.attach(plan)
        plan.displacement = Displacement(plan.graph)  # for the private audit file only
        plan.quiet = not progress  # also silences a first-use build of the profile table
        # The engine's cached table is verified (hashed) while the records are checked.
        load_in_background(plan.graph, plan.profiles)
        # So is the search's layout along the map made, where a large release at a small
        # epsilon sorts its records by it (about half a second no draw would overlap).
        prepare_in_background(plan.mechanism, _postcodes_at_most(reader))
        input_sha256 = _input_sha256(input_path)

        # A budget's refusals stop the release whatever on_error says (over_budget_error): a
        # check pass finds them all before anything is written.
        budgeted = ledger is not None and ledger.budget is not None
        checked = _CheckPass(total=reader.num_rows)
        if plan.on_error == "error" or budgeted:
            checked = _check_pass(plan, reader, input_path, input_sha256, progress)
        first, ahead, chunks, total = checked.first, checked.ahead, checked.chunks, checked.total

        columns = plan.output_columns(reader.columns)
        schema = (
            reader.output_schema(columns, options.out_column)
            if table_format(output_path) == "parquet"
            else None
        )
        writer = open_writer(out_tmp.handle, output_path.name, reader.columns, schema)
        counts = dict.fromkeys(COUNT_KEYS, 0)
        with _bar(progress, total, "writing" if ahead is not None else "releasing") as bar:
            # closing(): an error while writing stops the workers drawing the next chunk now
            if ahead is not None:
                outputs = ahead.released_chunks(reader.chunks(), bar.update)
            else:  # a file of one chunk is not read again: that chunk is ``first``, as checked
                again = [first.df] if first is not None and chunks == 1 else reader.chunks()
                outputs = _released_chunks(plan, again, bar.update, first)
            try:
                with closing(outputs) as released:
                    for out, part in released:
                        writer.write(out)
                        merge_counts(counts, part)
                        del out  # not held while the next chunk is checked (two chunks at most)
            except OverBudgetError:
                if not budgeted:
                    raise
                # The check pass found none: a release recorded since then spent the budget.
                raise ledger.spent_meanwhile() from None
        if counts["records"] == 0:
            raise _no_records(reader)
        if ahead is not None:
            ahead.finish()
        writer.close(columns)
        writer = None
        out_tmp.finish()
        if _input_sha256(input_path) != input_sha256:
            raise InputDataError(
                "the input file changed while it was being released; nothing was written"
            )
        counts["identifiers_with_several_postcodes"] = plan.subjects_with_several_postcodes
        plan.warn_subjects()

        manifest = _write_descriptions(
            claim,
            plan,
            reader,
            output_path,
            manifest_path,
            out_tmp.path,
            input_path=input_path,
            input_sha256=input_sha256,
            counts=counts,
            started=started,
        )
        if ledger is not None:  # pending ledger entry, durable before anything is renamed
            ledger.prepare(output_path, manifest["output"]["sha256"])
        # All three move into place together, the output last (OutputClaim.commit).
        claim.commit()
        if ledger is not None:
            ledger.commit()
        return manifest
    except OSError as exc:
        raise write_failure(exc) from None
    except KeyboardInterrupt:
        stopped = True
        raise
    finally:
        if writer is not None:
            writer.abort()
        if ledger is not None:  # (a stopped run does not wait for the ledger's lock again)
            ledger.finish(wait=not stopped)
