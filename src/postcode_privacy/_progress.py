"""Progress on stderr for long commands: a tqdm bar on a terminal, plain stage lines otherwise.

A tqdm bar redraws itself with carriage returns, which turns a CI log or a ``2> file`` into one
unreadable line; when stderr is not a terminal we print one short line per stage (and at each
quarter of a long stage) instead.  Library code never prints: it accepts a ``progress``
callable and calls ``progress(stage, done, total)``; the command line passes a :class:`Progress`.
"""

from __future__ import annotations

import contextlib
import sys
import time


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def timing_text(elapsed: float, done: int, total: int, since: tuple[float, int] = (0.0, 0)) -> str:
    """``3.1 s`` at the start or end of a stage, ``3.1 s, about 9 s left`` part-way: what a log
    line shows where a terminal's tqdm bar would show its estimate.  The estimate assumes the
    rest goes at the rate since ``since`` (elapsed, done: the stage's first report, after the
    one-off work its first piece does: loading the compiled code, building a table on first
    use, which had a release of 25,000 records say "about 39 min left" half a second before its
    end), and waits for a twentieth of the stage (1 of 200,000 said "about 12.8 h left")."""
    started, done_then = since
    if 0 < done < total and done * 20 >= total and done > done_then:
        left = (elapsed - started) * (total - done) / (done - done_then)
        return f"{elapsed:.1f} s, about {_duration(left)} left"
    return f"{elapsed:.1f} s"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Progress:
    """``progress(stage, done, total)``: one tqdm bar per stage on a terminal, else lines such as
    ``evaluate: adversary 10/40 (3.1 s, about 9 s left)``.  ``close()`` ends the last bar."""

    def __init__(self, prefix: str, *, terminal: bool | None = None):
        self.prefix = prefix
        self.terminal = stderr_is_terminal() if terminal is None else terminal
        self._stage: str | None = None
        self._bar = None
        self._started = time.perf_counter()
        self._next_line = 0
        self._since: tuple[float, int] | None = None  # the stage's first report with progress

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self._stage:
            self.close()
            self._stage, self._started = stage, time.perf_counter()
            self._next_line = 0
            self._since = None
            if self.terminal:
                from tqdm import tqdm

                self._bar = tqdm(
                    total=total, desc=f"{self.prefix}: {stage}", file=sys.stderr, leave=False
                )
        if self._bar is not None:
            self._bar.n = done
            self._bar.refresh()
            return
        # Lines at the start, at each quarter, and at the end of a stage.
        elapsed = time.perf_counter() - self._started
        if self._since is None and done > 0:
            self._since = (elapsed, done)
        if done >= self._next_line or done == total:
            timing = timing_text(elapsed, done, total, self._since or (0.0, 0))
            print(
                f"{self.prefix}: {stage} {done}/{total} ({timing})",
                file=sys.stderr,
                flush=True,
            )
            self._next_line = done + max(1, -(-total // 4)) if done < total else total + 1

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class StepLines:
    """A stand-in for a tqdm bar (``update``/``set_postfix_str``/``close``) that prints
    ``desc: step k of n, what it did (elapsed)``."""

    def __init__(self, desc: str, total: int):
        self.desc, self.total, self.done = desc, total, 0
        self._started = time.perf_counter()
        self._what = ""

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self._what = text

    def update(self, n: int = 1) -> None:
        self.done += n
        elapsed = time.perf_counter() - self._started
        what = f", {self._what}" if self._what else ""
        print(
            f"{self.desc}: step {self.done} of {self.total}{what} ({elapsed:.1f} s)",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        pass


def step_bar(desc: str, total: int):
    """A tqdm bar of ``total`` steps on a terminal, :class:`StepLines` otherwise."""
    if not stderr_is_terminal():
        return StepLines(desc, total)
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr)


@contextlib.contextmanager
def stage_progress(prefix: str, *, quiet: bool):
    """A :class:`Progress` for the block (``None`` with ``quiet``), closed however it ends."""
    if quiet:
        yield None
        return
    progress = Progress(prefix)
    try:
        yield progress
    finally:
        progress.close()
