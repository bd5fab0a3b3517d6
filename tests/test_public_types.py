"""The package's type hints reach its users (``py.typed``), and say what the API takes: an
API review of round 36 found no marker, so a user's type checker saw every name as ``Any``, and
with one, two documented calls (``ReleaseOptions(epsilon=1, ...)``, ``perturb_frame(graph=a
function)``) that a type checker refused."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import postcode_privacy

USER_CODE = """
import pandas as pd

from postcode_privacy import Key, Mechanism, default_graph, perturb_frame
from postcode_privacy.release import ReleaseOptions, release_file

graph = default_graph()
key = Key.generate()
df = pd.DataFrame({"person_id": ["1"], "postcode": ["LS1 1AA"]})
options = ReleaseOptions(epsilon=1, id_column="person_id", postcode_column="postcode")
out: pd.DataFrame = perturb_frame(df, key=key, graph=lambda: graph, options=options)
released, counts = perturb_frame(df, key=key, options=options, with_counts=True)
reveal_type(counts)
mechanism = Mechanism(graph, 0.5)
manifest = release_file("in.csv", "out.csv", key=key, epsilon="1", id_column="a",
                        postcode_column="b")
"""


def test_the_package_declares_its_type_hints():
    assert (Path(postcode_privacy.__file__).parent / "py.typed").is_file()


@pytest.mark.slow  # a type checker's run: several seconds
def test_documented_calls_pass_a_users_type_checker(tmp_path):
    user = tmp_path / "user.py"
    user.write_text(USER_CODE)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", str(user)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    # (the one note is reveal_type's: the counts are a dict of whole numbers, not Any)
    assert re.search(r'Revealed type is "(builtins\.)?dict\[(builtins\.)?str, (builtins\.)?int\]"',
                     done.stdout), done.stdout  # fmt: skip
    assert "error:" not in done.stdout and "Success" in done.stdout, done.stdout
