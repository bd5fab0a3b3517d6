"""File-to-file release: the workflow behind ``postcode-privacy perturb``.

Guarantees (docs/release.md, "Nothing is lost"):

* the input is only ever opened for reading, and its SHA-256 is taken before and after the run,
  so an input that changes underneath the release fails it;
* the output and its manifest are written to temporary files in the output's own directory and
  moved into place with ``os.replace`` only when everything has succeeded, output first and
  manifest last; on any error or interruption (``KeyboardInterrupt``) the temporary files are
  removed, so a failed run leaves nothing behind and never a partial output;
* the output may not be the input (same path or same file), and an existing output or manifest
  is only replaced with ``force=True``;
* with ``on_error="error"`` every chunk is checked before anything is perturbed, and one failing
  record anywhere means no output at all.

Memory is bounded by the chunk size plus 16 bytes per distinct subject identifier (the
duplicate-subject check), whatever the length of the file.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import sys
from pathlib import Path

import pandas as pd

from ..atomic import TempFile, fsync_directory
from ..errors import InputDataError, InvalidParameterError, OutputExistsError, PostcodePrivacyError
from ..graph.graph import Graph
from ..mechanism import Key
from .plan import (
    COUNT_KEYS,
    ChunkCheck,
    ReleasePlan,
    check_columns,
    failure_error,
    merge_counts,
)
from .tables import TableReader, open_writer, table_format

__all__ = ["release_file", "manifest_path_for", "MANIFEST_FORMAT", "MANIFEST_VERSION",
           "DEFAULT_CHUNK_SIZE"]

MANIFEST_FORMAT = "postcode-privacy-manifest"
MANIFEST_VERSION = 1
MANIFEST_SUFFIX = ".manifest.json"
DEFAULT_CHUNK_SIZE = 100_000


def manifest_path_for(output_path: str | os.PathLike) -> Path:
    """``OUTPUT.manifest.json`` beside the output."""
    path = Path(output_path)
    return path.with_name(path.name + MANIFEST_SUFFIX)


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


def _check_paths(input_path: Path, output_path: Path, manifest: Path, force: bool) -> None:
    if not input_path.exists():
        raise InputDataError("the input file does not exist")
    if not input_path.is_file():
        raise InputDataError("the input is not a regular file")
    table_format(input_path)
    table_format(output_path)
    for target in (output_path, manifest):
        if _same_file(input_path, target):
            raise OutputExistsError("refusing to write over the input file; choose another output")
    for target in (output_path, manifest):
        if target.is_dir():
            raise InvalidParameterError("the output path is a directory")
        if (target.exists() or target.is_symlink()) and not force:
            which = "output" if target == output_path else "manifest"
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
                 terminated_locations: pd.DataFrame | None = None, ledger=None) -> dict:
    """Release ``input_path`` to ``output_path`` and write ``OUTPUT.manifest.json``; return the
    manifest.

    Options are those of :func:`~postcode_privacy.perturb_frame`, plus ``force`` (replace an
    existing output and manifest), ``chunk_size`` (records held in memory at once; the output
    does not depend on it) and ``progress`` (tqdm bars on stderr).  ``graph=None`` loads the
    embedded national graph, after the cheap checks on paths, options and columns.
    ``ledger`` (a :class:`~postcode_privacy.ledger.LedgerRecorder`) screens records against a
    budget and records the release, atomically with its files (docs/ledger.md).
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise InvalidParameterError("chunk_size must be a whole number of at least 1")
    input_path, output_path = Path(input_path), Path(output_path)
    manifest_path = manifest_path_for(output_path)
    _check_paths(input_path, output_path, manifest_path, force)
    reader = TableReader(input_path, chunk_size)
    # Cheap column checks before the graph is loaded (the plan repeats them on every chunk).
    check_columns(reader.columns, id_column=id_column, postcode_column=postcode_column,
                  out_column=out_column)

    temps: list[TempFile] = []
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
        if ledger is not None:
            ledger.attach(plan)
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

        description = plan.describe()
        manifest = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_VERSION,
            "library_version": description.pop("library_version"),
            "output_stability_version": description.pop("output_stability_version"),
            "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "input": {"path": input_path.name, "format": reader.format,
                      "sha256": input_sha256, "records": counts["records"]},
            "output": {"path": output_path.name, "format": table_format(output_path),
                       "sha256": _sha256_file(out_tmp.path), "rows": counts["rows_out"]},
            **description,
            "terminated_locations": (None if plan.terminated != "nearest" else
                                     "supplied" if terminated_locations is not None else
                                     "bundled ONS postcode directory, located postcodes not live "
                                     "in Code-Point Open"),
            "counts": counts,
        }
        man_tmp = TempFile(manifest_path)
        temps.append(man_tmp)
        man_tmp.handle.write((json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
        man_tmp.finish()
        # With --force an old manifest may exist: remove it first, so that an interruption
        # between the two renames leaves an output without a manifest, never a mismatched pair.
        if ledger is not None:  # pending ledger entry, durable before anything is renamed
            ledger.prepare(output_path, manifest["output"]["sha256"])
        manifest_path.unlink(missing_ok=True)
        out_tmp.commit()
        man_tmp.commit()
        temps.clear()
        fsync_directory(output_path.parent)
        if ledger is not None:
            ledger.commit()
        return manifest
    except OSError as exc:
        raise PostcodePrivacyError(
            f"cannot write the output: {exc.strerror or type(exc).__name__}") from None
    finally:
        if writer is not None:
            writer.abort()
        for temp in temps:
            temp.discard()
        if ledger is not None:
            ledger.finish()
