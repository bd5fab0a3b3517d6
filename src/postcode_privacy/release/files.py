"""File-to-file release: the workflow behind ``postcode-privacy perturb``.

Guarantees (docs/release.md, "Nothing is lost"):

* the input is only ever opened for reading, and its SHA-256 is taken before and after the run,
  so an input that changes underneath the release fails it;
* the output, its publishable manifest and its private audit file (``manifest.py``) are written
  to temporary files in the output's own directory and moved into place with ``os.replace``
  only when everything has succeeded: audit file, then manifest, then the output last, so an
  output never exists without the manifest and audit file that describe it (an old output is
  removed first under ``force``); on any error or interruption (``KeyboardInterrupt``) the
  temporary files, and a manifest or audit file already moved, are removed, so a failed run
  leaves nothing behind and never a partial output;
* the output may not be the input (same path or same file), and an existing output, manifest
  or audit file is only replaced with ``force=True``;
* with ``on_error="error"`` every chunk is checked before anything is perturbed, and one failing
  record anywhere means no output at all.

Memory is bounded by the chunk size plus 16 bytes per distinct subject identifier (the
duplicate-subject check), whatever the length of the file.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pandas as pd

from ..atomic import TempFile, fsync_directory
from ..errors import InputDataError, InvalidParameterError, OutputExistsError, PostcodePrivacyError
from ..graph.graph import Graph
from ..mechanism import Key
from .manifest import (
    MANIFEST_FORMAT,
    MANIFEST_VERSION,
    audit_path_for,
    build_audit,
    build_manifest,
    encode,
    manifest_path_for,
)
from .plan import (
    COUNT_KEYS,
    ChunkCheck,
    ReleasePlan,
    check_columns,
    failure_error,
    merge_counts,
)
from .tables import TableReader, open_writer, table_format

__all__ = ["release_file", "manifest_path_for", "audit_path_for", "MANIFEST_FORMAT",
           "MANIFEST_VERSION", "DEFAULT_CHUNK_SIZE"]

DEFAULT_CHUNK_SIZE = 100_000


def _sha256_file(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _same_file(a: Path, b: Path) -> bool:
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _check_paths(input_path: Path, output_path: Path, side_files: tuple[Path, ...],
                 force: bool) -> None:
    if not input_path.exists():
        raise InputDataError("the input file does not exist")
    if not input_path.is_file():
        raise InputDataError("the input is not a regular file")
    table_format(input_path)
    table_format(output_path)
    for target in (output_path, *side_files):
        if _same_file(input_path, target):
            raise OutputExistsError("refusing to write over the input file; choose another output")
    for target in (output_path, *side_files):
        if target.is_dir():
            raise InvalidParameterError("the output path is a directory")
        if (target.exists() or target.is_symlink()) and not force:
            which = ("output" if target == output_path else
                     "manifest" if target.name.endswith(".manifest.json") else "audit")
            raise OutputExistsError(
                f"the {which} file already exists; use --force (force=True) to replace it")
    parent = output_path.parent
    if not parent.exists():
        raise InvalidParameterError("the output directory does not exist")
    if not parent.is_dir():
        raise InvalidParameterError("the output's parent path is not a directory")


def _bar(progress: bool, total: int | None, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, disable=not progress, file=sys.stderr, unit=" records", desc=desc,
                dynamic_ncols=True, leave=False)


def _no_records(reader: TableReader) -> InputDataError:
    if reader.format == "csv":
        return InputDataError("the input has a header but no records")
    return InputDataError("the input has no records")


def release_file(input_path: str | os.PathLike, output_path: str | os.PathLike, *, key: Key,
                 epsilon, id_column: str, postcode_column: str, graph: Graph | None = None,
                 radius: int | None = None, on_error: str = "error",
                 out_column: str = "postcode_dp", keep_source_postcode: bool = False,
                 terminated: str = "error", force: bool = False,
                 chunk_size: int = DEFAULT_CHUNK_SIZE, progress: bool = False,
                 terminated_locations: pd.DataFrame | None = None) -> dict:
    """Release ``input_path`` to ``output_path``, with the publishable ``OUTPUT.manifest.json``
    and the private ``OUTPUT.audit.json`` beside it (see ``manifest.py``); return the manifest.

    The counts by outcome are private: they are in the audit file (``manifest.read_audit``).

    Options are those of :func:`~postcode_privacy.perturb_frame`, plus ``force`` (replace an
    existing output and manifest), ``chunk_size`` (records held in memory at once; the output
    does not depend on it) and ``progress`` (tqdm bars on stderr).  ``graph=None`` loads the
    embedded national graph, after the cheap checks on paths, options and columns.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidParameterError("chunk_size must be a whole number of at least 1")
    input_path, output_path = Path(input_path), Path(output_path)
    manifest_path = manifest_path_for(output_path)
    audit_path = audit_path_for(output_path)
    _check_paths(input_path, output_path, (manifest_path, audit_path), force)
    reader = TableReader(input_path, chunk_size)
    # Cheap column checks before the graph is loaded (the plan repeats them on every chunk).
    check_columns(reader.columns, id_column=id_column, postcode_column=postcode_column,
                  out_column=out_column)

    temps: list[TempFile] = []
    moved: list[Path] = []  # side files already in place, removed again if the output is not
    writer = None
    try:
        out_tmp = TempFile(output_path)
        temps.append(out_tmp)
        plan = ReleasePlan(key=key, epsilon=epsilon, id_column=id_column,
                           postcode_column=postcode_column, graph=graph, radius=radius,
                           on_error=on_error, out_column=out_column,
                           keep_source_postcode=keep_source_postcode, terminated=terminated,
                           terminated_locations=terminated_locations)
        plan.check_columns(reader.columns)
        input_sha256 = _sha256_file(input_path)
        total = reader.num_rows

        if plan.on_error == "error":
            check = ChunkCheck()
            with _bar(progress, total, "checking") as bar:
                offset = 0
                for chunk in reader.chunks():
                    check.merge(plan.check_chunk(chunk, offset))
                    offset += len(chunk)
                    bar.update(len(chunk))
            if check.counts["records"] == 0:
                raise _no_records(reader)
            if check.failed:
                raise failure_error(check.row_errors, check.counts)
            total = check.counts["records"]

        columns = plan.output_columns(reader.columns)
        schema = reader.output_schema(columns, out_column) if table_format(output_path) == "parquet" else None
        writer = open_writer(out_tmp.handle, output_path.name, schema)
        counts = dict.fromkeys(COUNT_KEYS, 0)
        with _bar(progress, total, "releasing") as bar:
            offset = 0
            for chunk in reader.chunks():
                out, part = plan.process_chunk(chunk, offset, warn=False)
                writer.write(out)
                merge_counts(counts, part)
                offset += len(chunk)
                bar.update(len(chunk))
        if counts["records"] == 0:
            raise _no_records(reader)
        writer.close(columns)
        writer = None
        out_tmp.finish()
        if _sha256_file(input_path) != input_sha256:
            raise InputDataError("the input file changed while it was being released; "
                                 "nothing was written")
        counts["identifiers_with_several_postcodes"] = plan.subjects_with_several_postcodes
        plan.warn_subjects(stacklevel=2)

        manifest = build_manifest(plan.describe(), output_path=output_path,
                                  output_format=table_format(output_path),
                                  output_sha256=_sha256_file(out_tmp.path),
                                  rows=counts["rows_out"])
        audit = build_audit(manifest, input_path=input_path, input_format=reader.format,
                            input_sha256=input_sha256, counts=counts)
        man_tmp = TempFile(manifest_path)
        temps.append(man_tmp)
        man_tmp.handle.write(encode(manifest))
        man_tmp.finish()
        audit_tmp = TempFile(audit_path)
        temps.append(audit_tmp)
        os.chmod(audit_tmp.path, 0o600)  # private before a byte is written
        audit_tmp.handle.write(encode(audit))
        audit_tmp.finish()
        # Output last: an output on disk always has its manifest and audit file.  With --force
        # the old three are removed first, so an old file never sits beside a new one.
        for old in (output_path, manifest_path, audit_path):
            old.unlink(missing_ok=True)
        for temp in (audit_tmp, man_tmp):
            temp.commit()
            moved.append(temp.target)
        out_tmp.commit()
        moved.clear()
        temps.clear()
        fsync_directory(output_path.parent)
        return manifest
    except OSError as exc:
        raise PostcodePrivacyError(
            f"cannot write the output: {exc.strerror or type(exc).__name__}") from None
    finally:
        if writer is not None:
            writer.abort()
        for temp in temps:
            temp.discard()
        for path in moved:  # the output never arrived: its description must not stay
            path.unlink(missing_ok=True)
