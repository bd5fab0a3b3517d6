"""Writing a report (HTML or JSON) to a file, atomically."""

from __future__ import annotations

import json
import os

from .. import atomic
from ._data import Report
from ._render import render_html


def write_report(report: Report, path: str | os.PathLike, as_json: bool = False) -> None:
    """Write the HTML page (or, with ``as_json``, the data as JSON) atomically."""
    if as_json:
        payload = json.dumps(report.data, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    else:
        payload = render_html(report).encode("utf-8")
    atomic.write_atomic(path, payload)
