"""What an attacker holding the key learns: collisions of the keyed map near an output.

With the key, the graph and the parameters, an attacker can run the mechanism on any postcode
for a known subject and discard every postcode that does not map to the observed output.  The
survivors are the candidate set C(s, y) = {x' : f_key(s, x') = y}.  This module counts, for each
sampled subject, the postcodes *other than the truth* within ``hops`` hops of the output that map
to the same output.  Those are lower bounds on |C(s, y)| - 1: a search of the whole country
could only find more, since the mechanism's support is every postcode.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from .._limits import DEFAULT_HOPS
from ..mechanism.keys import Key
from ..mechanism.mechanism import Mechanism
from ..mechanism.subject import canonical_subject_id
from .exact import ExactMechanism


@dataclass
class CompromiseSummary:
    """Collision counts over a sample of (subject, truth, output)."""

    subjects: int
    hops: int
    histogram: dict[int, int]  # number of other nearby postcodes mapping to the output -> subjects
    mean_collisions: float
    max_collisions: int
    share_with_collision: float
    median_searched: float

    def to_json(self) -> dict:
        out = dict(self.__dict__)
        out["histogram"] = {str(k): v for k, v in sorted(self.histogram.items())}
        return out


def perturb_nodes(mechanism: Mechanism, key: Key, subjects, nodes) -> np.ndarray:
    """Keyed outputs (node indices) for (subject, true node) pairs.

    Uses the compiled batch engine, whose outputs are exactly the mechanism's.  (numba is a
    required dependency, so the engine is always there; it is imported on first use because
    importing numba takes a moment.)
    """
    from ..engine import perturb_nodes as engine_perturb_nodes

    ids = [canonical_subject_id(s) for s in subjects]
    node_array = np.asarray(nodes, dtype=np.int64)
    return np.asarray(engine_perturb_nodes(mechanism, key, ids, node_array), dtype=np.int64)


def nearby_nodes(exact: ExactMechanism, output: int, hops: int) -> np.ndarray:
    """Every node within ``hops`` (>= 1) hops of ``output``."""
    g = exact.graph
    locs, _ = exact.search.ball(int(g.node_location[output]), hops)
    ip, flat = g.members_indptr, g.members_flat
    return np.concatenate([flat[ip[v] : ip[v + 1]] for v in locs.tolist()]).astype(np.int64)


def key_compromise(
    exact: ExactMechanism, key: Key, subjects, truths, outputs, hops: int = DEFAULT_HOPS
) -> CompromiseSummary:
    """Collision counts for every (subject, truth, output) triple; ``outputs`` must be the keyed
    releases of ``truths`` under ``key``.  For each, the postcodes other than the truth within
    ``hops`` hops of the output are run through the keyed mechanism for the same subject, and
    those landing on the output are counted."""
    if hops < 1:
        raise ValueError("hops must be at least 1")
    pair_subjects, pair_nodes, owner = [], [], []
    searched = []
    for i, (subject, truth, output) in enumerate(zip(subjects, truths, outputs)):
        near = nearby_nodes(exact, int(output), hops)
        near = near[near != int(truth)]
        searched.append(int(near.size))
        pair_subjects.extend([subject] * near.size)
        pair_nodes.append(near)
        owner.append(np.full(near.size, i, dtype=np.int64))
    if not searched:
        raise ValueError("no subjects to evaluate")
    nodes = np.concatenate(pair_nodes) if pair_nodes else np.zeros(0, dtype=np.int64)
    owners = np.concatenate(owner) if owner else np.zeros(0, dtype=np.int64)
    released = perturb_nodes(exact.mechanism, key, pair_subjects, nodes)
    targets = np.asarray([int(v) for v in outputs], dtype=np.int64)
    hits = released == targets[owners]
    counts = np.bincount(owners[hits], minlength=len(searched)).tolist()
    return CompromiseSummary(
        subjects=len(counts),
        hops=hops,
        histogram=dict(sorted(Counter(counts).items())),
        mean_collisions=float(np.mean(counts)),
        max_collisions=int(max(counts)),
        share_with_collision=float(np.mean([c > 0 for c in counts])),
        median_searched=float(np.median(searched)),
    )
