"""A Bayesian adversary who knows the graph, epsilon, R and the prior, but not the key.

Having seen released postcodes y_1 .. y_J of one subject, each an independent draw (different
keys), the adversary's posterior over the subject's true postcode is

    post(x') proportional to pi(x') * prod_j K(x')(y_j)
           = pi(x') * prod_j pi(y_j) * P[min(d(x', y_j), R)] / Z(x')**J,

and the pi(y_j) cancel.  Releases under the *same* key, subject, postcode, graph, epsilon, R and
output-stability version are one draw, not several: they are identical, and an adversary who
knows the mechanism counts them once (``distinct_draws``).  That is the whole effect of keyed
determinism, and ``evaluate`` checks it: K keyed releases give exactly the one-release figures.

Candidate set.  The posterior is evaluated exactly over a finite candidate set C: every postcode
within ``hops`` hops of some observed output, plus the true postcode if it lies further out (a
tail draw).  Because C always contains the truth, restricting the posterior to C can only
*raise* the truth's posterior, *improve* its rank and make identification *more* likely than
over the whole graph: the figures overstate the adversary, never understate it.

Per subject, ties are broken the way an adversary choosing at random among equals would: the
rank of the truth is its expected position, g + (t + 1) / 2 with g the number of candidates with
a strictly larger posterior and t the number (truth included) with an equal one, and
identification scores 1/t when g = 0, else 0.  Comparisons are exact (cross-multiplied
integers); the posterior probability of the truth is computed from integers scaled by 2**S and
is within 2**-100 of the exact value relative to the largest candidate's.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .._limits import DEFAULT_HOPS
from ..errors import PostcodePrivacyError
from .exact import ExactMechanism


@dataclass(frozen=True)
class AdversaryOutcome:
    """How the truth fares in the adversary's posterior for one subject."""

    identified: Fraction  # 1/t if the truth is one of t tied maxima, else 0
    rank: Fraction  # expected position of the truth, ties broken at random
    posterior: float
    candidates: int
    draws: int


def distinct_draws(observations) -> list[int]:
    """The independent draws among ``(draw_id, output_node)`` observations.

    Observations sharing a ``draw_id`` (the same key, subject and inputs) must agree, since the
    keyed mechanism is deterministic; they count once.  Raises if they do not agree.
    """
    seen: dict[object, int] = {}
    for draw_id, output in observations:
        if draw_id in seen and seen[draw_id] != int(output):
            raise PostcodePrivacyError(
                "releases under one key differed for the same subject: keyed determinism is broken"
            )
        seen.setdefault(draw_id, int(output))
    return list(seen.values())


def candidate_nodes(exact: ExactMechanism, truth: int, outputs: list[int], hops: int) -> np.ndarray:
    """Every node within ``hops`` hops of an output (hops >= 1), plus the truth's location."""
    g = exact.graph
    locs = [np.array([g.node_location[truth]], dtype=np.int64)]
    for y in outputs:
        ball, _ = exact.search.ball(int(g.node_location[y]), hops)
        locs.append(ball)
    unique = np.unique(np.concatenate(locs))
    ip, flat = g.members_indptr, g.members_flat
    return np.sort(
        np.concatenate([flat[ip[v] : ip[v + 1]] for v in unique.tolist()]).astype(np.int64)
    )


def posterior_outcome(
    exact: ExactMechanism, truth: int, outputs: list[int], hops: int = DEFAULT_HOPS
) -> AdversaryOutcome:
    """The adversary's view of ``truth`` after independent draws ``outputs`` (see module doc)."""
    if hops < 1:
        raise ValueError("hops must be at least 1")
    if not outputs:
        raise ValueError("at least one observed output is needed")
    candidates = candidate_nodes(exact, truth, outputs, hops)
    prior = exact.graph.prior
    powers = exact.powers
    j = len(outputs)
    numerators = [int(prior[c]) for c in candidates.tolist()]
    for y in outputs:
        for i, h in enumerate(exact.node_hops(y, candidates)):
            numerators[i] *= powers[h]
    exact.prepare(candidates)
    denominators = [exact.normaliser(c) ** j for c in candidates.tolist()]
    t = int(np.searchsorted(candidates, truth))
    num_x, den_x = numerators[t], denominators[t]
    greater = ties = 0
    for i, (num, den) in enumerate(zip(numerators, denominators)):
        if i == t:
            continue
        left, right = num * den_x, num_x * den
        if left > right:
            greater += 1
        elif left == right:
            ties += 1
    # Posterior of the truth from integers scaled so the largest ratio has >= 100 bits.
    shift = max(
        0, 101 + min(d.bit_length() - n.bit_length() for n, d in zip(numerators, denominators))
    )
    scaled = [(n << shift) // d for n, d in zip(numerators, denominators)]
    posterior = float(Fraction(scaled[t], sum(scaled))) if sum(scaled) else 0.0
    identified = Fraction(1, ties + 1) if greater == 0 else Fraction(0)
    rank = greater + Fraction(ties + 2, 2)
    return AdversaryOutcome(identified, rank, posterior, len(candidates), j)


@dataclass
class AdversarySummary:
    """Figures over a sample of subjects for one observation scenario."""

    subjects: int
    identification_rate: float
    identified: float  # expected number of subjects identified
    median_rank: float
    median_posterior: float
    median_candidates: float

    def to_json(self) -> dict:
        return dict(self.__dict__)


def summarise(outcomes: list[AdversaryOutcome]) -> AdversarySummary:
    if not outcomes:
        raise ValueError("no outcomes to summarise")
    identified = sum((o.identified for o in outcomes), Fraction(0))
    return AdversarySummary(
        subjects=len(outcomes),
        identification_rate=float(identified / len(outcomes)),
        identified=float(identified),
        median_rank=float(np.median([float(o.rank) for o in outcomes])),
        median_posterior=float(np.median([o.posterior for o in outcomes])),
        median_candidates=float(np.median([o.candidates for o in outcomes])),
    )


@dataclass(frozen=True)
class ExpectedIdentification:
    """The chance, over the draw itself, that the adversary of ``posterior_outcome`` names
    the true postcode x after one release: E_y[identified(x, y)] for y drawn from K(x).

    ``low`` <= that chance <= ``high``, both exact; they are equal unless more outputs y than
    the limit of ``expected_identification`` needed a posterior of their own."""

    low: Fraction
    high: Fraction
    self_probability: Fraction  # K(x)(x): the release is the truth itself


def expected_identification(
    exact: ExactMechanism, truth: int, hops: int = DEFAULT_HOPS, limit: int = 64
) -> ExpectedIdentification:
    """E_y[identified(x, y)] over every output y of K(x), exactly (see the module doc for
    ``identified``).

    Most outputs need no posterior: the adversary never names x from y when y itself, a
    candidate, is strictly more likely, that is when pi(y) P_0 / Z(y) > pi(x) P_d / Z(x),
    d = min(d(x, y), R).  Node distances are a metric, so every z has d(y, z) >= d(x, z) - d
    and Z(y) <= sum_h M_h P[max(h - d, 0)] (M_h: x's node-shell masses, h = R the tail);
    for an output in the tail, which may be any distance away, Z(y) <= P_0 Pi.  Those bounds
    decide, in exact integers, every y for which they suffice; the rest (at most ``limit``
    of them, nearest first, the tail's last) get ``posterior_outcome`` each, and any beyond
    the limit count as identified in ``high`` and as not in ``low``.
    """
    graph, powers, radius = exact.graph, exact.powers, exact.radius
    dist = exact.distribution(truth)
    z_x, pi_x, total = dist.normaliser, dist.prior, exact.total_prior
    nodes, node_hops = exact.ball_nodes(dist)
    # M_h, the prior mass of x's node shell h (h = R: the tail), in exact int64 sums (the
    # total prior is at most 2**62)
    shell = np.zeros(radius + 1, dtype=np.int64)
    np.add.at(shell, node_hops, graph.prior[nodes])
    masses = shell.tolist()
    masses[radius] += total - dist.ball_mass
    scale = powers[0] * z_x  # y is safe at distance d iff pi(y) * scale > pi_x P_d Zmax_d

    def threshold(d: int, z_max: int) -> int:
        """The largest prior of an output at distance d that the bound does not rule out."""
        return (pi_x * powers[d] * z_max) // scale

    ruled = [0] * (radius + 1)
    for d in range(1, radius):
        z_max = sum(m * powers[max(h - d, 0)] for h, m in enumerate(masses))
        ruled[d] = threshold(d, z_max)
    ruled[radius] = threshold(radius, powers[0] * total)
    self_p = Fraction(powers[0] * pi_x, z_x)
    low = self_p * posterior_outcome(exact, truth, [truth], hops).identified
    high = low
    # ruled[d] as int64, capped where it is past any prior (then nothing there is ruled out)
    cap = int(graph.prior.max())
    ceilings = np.array([min(r, cap) for r in ruled], dtype=np.int64)
    maybe = (node_hops >= 1) & (graph.prior[nodes] <= ceilings[node_hops])
    doubtful = list(zip(node_hops[maybe].tolist(), nodes[maybe].tolist()))
    in_ball = np.zeros(len(graph), dtype=bool)
    in_ball[nodes] = True
    tail = np.flatnonzero(~in_ball & (graph.prior <= ceilings[radius]))  # R or more hops
    doubtful += [(radius, y) for y in tail.tolist()]
    for k, (h, y) in enumerate(sorted(doubtful)):
        chance = Fraction(int(graph.prior[y]) * powers[h], z_x)
        if k >= limit:
            high += chance
            continue
        identified = posterior_outcome(exact, truth, [y], hops).identified
        low += chance * identified
        high += chance * identified
    return ExpectedIdentification(low, high, self_p)
