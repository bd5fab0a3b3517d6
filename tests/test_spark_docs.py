"""docs/spark.md's local example, run as written in a fresh Python process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from optional import require, require_java

require("pyspark", "pip install '.[spark]'")
require_java()
from spark_helpers import source_path

pytestmark = [pytest.mark.slow, pytest.mark.spark]

DOC = Path(__file__).parent.parent / "docs" / "spark.md"


def local_example() -> str:
    section = DOC.read_text().split("## Trying it on one machine", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_local_example_in_the_docs_runs(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(local_example())
    env = dict(os.environ, PYTHONPATH=source_path())
    for name in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE"):
        env.pop(name, None)  # a reader's fresh shell: no Spark Connect switch inherited
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "40 records released" in done.stdout
    parts = sorted((tmp_path / "released").glob("part-*.csv"))
    released = pd.concat([pd.read_csv(p, dtype=str) for p in parts])
    assert list(released.columns) == ["person.id", "postcode_dp"]
    assert len(released) == 40 and released["postcode_dp"].str.startswith("LS1 1A").all()
