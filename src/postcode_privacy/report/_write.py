"""Writing a report (HTML or JSON) to a file, atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .. import atomic
from ..errors import OutputExistsError, PostcodePrivacyError
from ._data import Report
from ._render import render_html


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then move it into place."""
    target = Path(path)
    if target.is_dir():
        raise OutputExistsError("the output path is a directory")
    try:
        atomic.write_atomic(target, data)
    except OSError as exc:
        raise PostcodePrivacyError(
            f"cannot write the output: {exc.strerror or type(exc).__name__}") from None


def write_report(report: Report, path: str | os.PathLike, as_json: bool = False) -> None:
    """Write the HTML page (or, with ``as_json``, the data as JSON) atomically."""
    if as_json:
        payload = json.dumps(report.data, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    else:
        payload = render_html(report).encode("utf-8")
    write_atomic(path, payload)
