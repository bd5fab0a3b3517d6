"""The README and the getting-started page run as written, in order, by a newcomer.

Every shell and Python block of those pages is run in a fresh directory whose ``.venv`` is this
test's own environment, with nothing of that environment on ``PATH``: a block that forgets to
activate it, names a file that does not exist, or uses a column the example file lacks fails
here exactly as it would for a reader pasting it.

The two set-up commands are the one exception, since they would build a second environment:
the test command must be the one ``.ci/run`` runs, and of the main-job command only the part
after the install (``.venv/bin/postcode-privacy demo``) is run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", "docs/getting-started.md"]
SETUP_PREFIX = "python3 -m venv .venv && .venv/bin/pip install "
FENCE = re.compile(r"^```(\w*)\s*$")

pytestmark = [pytest.mark.slow, pytest.mark.national]


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in page order."""
    blocks, lang, body = [], None, []
    for line in text.splitlines():
        match = FENCE.match(line.strip())
        if match and lang is None:
            lang, body = match.group(1), []
        elif line.strip() == "```" and lang is not None:
            blocks.append((lang, "\n".join(body)))
            lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def console_commands(body: str) -> list[str]:
    """The ``$ `` command lines of a console transcript (joined across trailing backslashes)."""
    commands, current = [], None
    for line in body.splitlines():
        if current is not None:
            current += "\n" + line
        elif line.startswith("$ "):
            current = line[2:]
        if current is not None and not current.endswith("\\"):
            commands.append(current)
            current = None
    return commands


def ci_test_command() -> str:
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    return lines[-1].strip()


def page_script(page: str, workdir: Path) -> str:
    """A bash script doing what a reader of ``page`` would do, block after block."""
    steps = ["set -euo pipefail"]
    python_blocks = 0
    for lang, body in fenced_blocks((ROOT / page).read_text(encoding="utf-8")):
        if lang == "bash":
            for command in re.split(r"(?<!\\)\n", body.strip()):
                if command.startswith(SETUP_PREFIX):
                    if "pytest" in command:
                        assert command == ci_test_command(), (
                            f"{page}: the test command differs from .ci/run's"
                        )
                        continue
                    assert command.endswith("&& .venv/bin/postcode-privacy demo"), command
                    command = ".venv/bin/postcode-privacy demo"
                steps.append(command)
        elif lang == "console":
            steps.extend(console_commands(body))
        elif lang == "python":
            python_blocks += 1
            script = workdir / f"block{python_blocks}.py"
            script.write_text(body + "\n", encoding="utf-8")
            steps.append(f"python {shlex.quote(script.name)}")
    return "\n".join(steps) + "\n"


def reader_environment() -> dict[str, str]:
    """The caller's environment without this virtual environment on PATH or activated."""
    env = dict(os.environ)
    venv_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p
        and os.path.realpath(p) != os.path.realpath(venv_bin)
        and not (Path(p) / "postcode-privacy").exists()
    )
    env.pop("VIRTUAL_ENV", None)
    return env


def test_console_parser_joins_continued_commands():
    body = "$ a \\\n    --b c\nout put\n$ d\n"
    assert console_commands(body) == ["a \\\n    --b c", "d"]


def test_block_parser_sees_each_fence():
    text = "x\n```bash\none\n```\n\n```python\nprint(1)\n```\n```\nplain\n```\n"
    assert fenced_blocks(text) == [("bash", "one"), ("python", "print(1)"), ("", "plain")]


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.usefixtures("national_graph")  # in the cache before `demo` loads it (conftest.py)
def test_page_runs_as_written(page, tmp_path):
    (tmp_path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    script = page_script(page, tmp_path)
    assert "postcode-privacy" in script
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=reader_environment(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (
        f"{page} does not run as written:\n{script}\n--- stderr ---\n{result.stderr[-3000:]}"
    )
    assert (tmp_path / "postcode-privacy-demo" / "records.csv").is_file()
