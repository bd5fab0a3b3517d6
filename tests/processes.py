"""Helpers for tests that run the command line in a child process and stop it part-way."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def reaped(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """``proc`` for the block; killed and waited for afterwards if it is still running (a
    failed assertion must not leave a child behind)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def wait_until(happened: Callable[[], bool], proc: subprocess.Popen, what: str) -> None:
    """Poll ``happened`` until it holds; fail naming ``what`` if ``proc`` ends first or a
    minute passes."""
    deadline = time.monotonic() + 60
    while not happened():
        assert proc.poll() is None, f"the run ended before {what}"
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.02)
