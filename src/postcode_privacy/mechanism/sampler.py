"""Exact two-stage sampling from the capped-metric graph exponential mechanism.

For a true node x the output y has probability K(x)(y) = pi(y) * P[min(d(x, y), R)] / Z(x)
(docs/methods.md, "The mechanism").  With W_h = P_h * pi(S_h) for the shells h < R, the tail
weight T = P_R * (Pi - pi(B)) for every node at R hops or more, C_h = W_0 + ... + W_h and
Z = C_{R-1} + T, the output is defined as follows (docs/spec.md, "Sampling"):

1. U in [0, 1) is the real number whose binary digits are the "shell" sub-stream.  The shell is
   the smallest h < R with U * Z < C_h; if there is none, the tail.
2. Within shell h, J = uniform_int(pi(S_h), "member") picks the node whose cumulative prior (in
   node order within the shell) first exceeds J.
3. In the tail, attempt t draws J = uniform_int(Pi, "tail", t) over the whole graph in node order
   and accepts the node it lands on unless it lies within R - 1 hops of x.

Step 1 is a comparison of an exact real with an exact rational, so any procedure that decides
it correctly gives the same output.  The lazy procedure below explores shells only until the
comparison is decided by bounds on Z that tighten as shells are added; the reference procedure
explores all R shells first.  Both call the same decision rule, so they agree by construction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np

from .stream import LazyUniform, SubjectStream

SHELL = b"shell"
MEMBER = b"member"
TAIL = b"tail"


def decide_below(uniform: LazyUniform, c: int, z_low: int, z_high: int) -> bool | None:
    """Is U < c / Z for every Z in [z_low, z_high]?  True, False, or None if not yet decided.

    U lies in [u / 2**k, (u + 1) / 2**k).  If (u + 1) / 2**k <= c / z_high then U < c / Z for
    all admissible Z; if u / 2**k >= c / z_low then U >= c / Z for all of them.
    """
    scaled = c << uniform.bits
    if (uniform.u + 1) * z_high <= scaled:
        return True
    if uniform.u * z_low >= scaled:
        return False
    return None


class ExploredShells(Protocol):
    """What ``choose_shell`` reads and extends: the shells explored so far from one source.

    ``cumulative[h]`` is C_h for h < ``depth``, ``explored_mass`` is the prior mass of those
    shells, and ``explore()`` adds the next shell.  ``ShellWalk`` is the reference one; the
    engine has its own over the compiled search (engine/fast.py).
    """

    @property
    def depth(self) -> int: ...

    @property
    def cumulative(self) -> Sequence[int]: ...

    @property
    def explored_mass(self) -> int: ...

    def explore(self) -> None: ...


class ShellWalk:
    """Shells explored so far from one source, with their prior masses and cumulative weights."""

    def __init__(self, shells: Iterator[np.ndarray], prior: np.ndarray, powers: tuple[int, ...]):
        self._shells, self._prior, self._powers = shells, prior, powers
        self.nodes: list[np.ndarray] = []
        self.masses: list[int] = []
        self.cumulative: list[int] = []
        self.explored_mass = 0

    @property
    def depth(self) -> int:
        """Number of shells explored."""
        return len(self.nodes)

    def explore(self) -> None:
        h = len(self.nodes)
        nodes = next(self._shells)
        mass = int(self._prior[nodes].sum(dtype=np.int64)) if nodes.size else 0
        self.nodes.append(nodes)
        self.masses.append(mass)
        previous = self.cumulative[-1] if self.cumulative else 0
        self.cumulative.append(previous + self._powers[h] * mass)
        self.explored_mass += mass


def choose_shell(
    walk: ExploredShells,
    uniform: LazyUniform,
    radius: int,
    powers: tuple[int, ...],
    total_prior: int,
) -> int:
    """Index of the chosen shell in 0 .. radius - 1, or ``radius`` for the tail (step 1).

    Invariant: every candidate before ``i`` has been decided "U >= C_i / Z".  Bounds on Z after
    exploring shells 0 .. h < R - 1: every unexplored node has weight between P_R and P_{h+1}
    times its prior, so C_h + P_R * M <= Z <= C_h + P_{h+1} * M with M the unexplored mass.
    """
    i = 0
    while True:
        h = walk.depth - 1
        if h >= 0:
            remaining = total_prior - walk.explored_mass
            z_low = walk.cumulative[h] + powers[radius] * remaining
            z_high = z_low if h == radius - 1 else walk.cumulative[h] + powers[h + 1] * remaining
            while i <= h:
                verdict = decide_below(uniform, walk.cumulative[i], z_low, z_high)
                if verdict is None:
                    break
                if verdict:
                    return i
                i += 1
            if i == radius:
                return radius
            if i <= h and h == radius - 1:
                uniform.refine()  # Z is exact; only more bits of U can decide
                continue
        walk.explore()


def pick_in_shell(stream: SubjectStream, nodes: np.ndarray, mass: int, prior: np.ndarray) -> int:
    """Step 2: a node of the shell with probability proportional to its prior."""
    j = stream.uniform_int(mass, MEMBER)
    cumulative = np.cumsum(prior[nodes], dtype=np.int64)
    return int(nodes[int(np.searchsorted(cumulative, j, side="right"))])


def pick_in_tail(
    stream: SubjectStream, ball: np.ndarray, prior_cumsum: np.ndarray, total_prior: int
) -> int:
    """Step 3: a node by prior over the whole graph, rejected while inside the ball."""
    inside = np.zeros(prior_cumsum.size, dtype=bool)
    inside[ball] = True
    attempt = 0
    while True:
        j = stream.uniform_int(total_prior, TAIL, attempt)
        node = int(np.searchsorted(prior_cumsum, j, side="right"))
        if not inside[node]:
            return node
        attempt += 1


def sample(
    stream: SubjectStream,
    shells: Iterator[np.ndarray],
    prior: np.ndarray,
    prior_cumsum: np.ndarray,
    total_prior: int,
    powers: tuple[int, ...],
    radius: int,
    *,
    lazy: bool = True,
) -> int:
    """One exact draw from K(x) for the source whose shells ``shells`` yields."""
    walk = ShellWalk(shells, prior, powers)
    if not lazy:
        while walk.depth < radius:
            walk.explore()
    uniform = LazyUniform(stream, SHELL)
    h = choose_shell(walk, uniform, radius, powers, total_prior)
    if h < radius:
        return pick_in_shell(stream, walk.nodes[h], walk.masses[h], prior)
    while walk.depth < radius:
        walk.explore()
    ball = np.concatenate(walk.nodes)
    return pick_in_tail(stream, ball, prior_cumsum, total_prior)
