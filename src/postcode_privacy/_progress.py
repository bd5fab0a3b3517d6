"""Progress on stderr for long work: a tqdm bar on a terminal, plain stage lines otherwise.

A tqdm bar redraws itself with carriage returns, which turns a CI log or a ``2> file`` into one
unreadable line; when stderr is not a terminal we print one short line per stage (and at each
quarter of a long stage) instead.  Every progress display of the package is made here, in one
of three shapes:

* :class:`Progress`, a callable ``progress(stage, done, total)`` for work in named stages (the
  studies behind ``evaluate``, ``report`` and ``calibrate`` take one; the one-off engine tables
  make their own);
* :func:`count_bar`, for one pass over a count of things (records, source files), taken by the
  file and frame releases and the source readers, which accept ``progress: bool``;
* :func:`step_bar`, for a fixed list of steps (building a graph).
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


class CountLines:
    """A stand-in for a tqdm bar over a count (``update``, a context manager) that prints
    ``prefix: desc...`` when it starts, ``prefix: desc done/total units (timing)`` at each
    quarter of a known total, and ``prefix: desc done: N units in 3.1 s`` at its end."""

    def __init__(self, total: int | None, desc: str, *, prefix: str, unit: str):
        from ._wording import counted

        self.total, self.desc, self.done = total, desc, 0
        self._prefix, self._unit, self._counted = prefix, unit, counted
        self._started = time.perf_counter()
        self._next = 0 if total else None
        self._since: tuple[float, int] | None = None  # the first update: after one-off work
        self._say(f"{desc}...")

    def _say(self, text: str) -> None:
        print(f"{self._prefix}: {text}", file=sys.stderr, flush=True)

    def update(self, n: int = 1) -> None:
        self.done += n
        elapsed = time.perf_counter() - self._started
        if self._since is None:
            self._since = (elapsed, self.done)
        if (
            self._next is not None
            and self.total
            and self.done >= self._next
            and self.done < self.total
        ):
            timing = timing_text(elapsed, self.done, self.total, self._since)
            of_total = self._counted(self.total, self._unit, grouped=True)
            self._say(f"{self.desc} {self.done:,}/{of_total} ({timing})")
            self._next = self.done + max(1, -(-self.total // 4))

    def close(self) -> None:
        pass

    def __enter__(self) -> CountLines:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            elapsed = time.perf_counter() - self._started
            done = self._counted(self.done, self._unit, grouped=True)
            self._say(f"{self.desc} done: {done} in {elapsed:.1f} s")


def count_bar(show: bool, total: int | None, desc: str, *, prefix: str, unit: str = "record"):
    """Feedback for one pass over ``total`` things (``unit`` names one): a tqdm bar (rate and,
    with a total, ETA) on a terminal, :class:`CountLines` otherwise, nothing unless ``show``."""
    from tqdm import tqdm

    if show and not stderr_is_terminal():
        return CountLines(total, desc, prefix=prefix, unit=unit)
    return tqdm(
        total=total,
        disable=not show,
        file=sys.stderr,
        unit=f" {unit}s",
        desc=desc,
        dynamic_ncols=True,
        leave=False,
        unit_scale=True,
        smoothing=0.1,
    )


def counting(items, show: bool, total: int | None, desc: str, *, prefix: str, unit: str):
    """``items`` unchanged, moving a :func:`count_bar` as each is taken."""
    with count_bar(show, total, desc, prefix=prefix, unit=unit) as bar:
        for item in items:
            yield item
            bar.update(1)


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
