"""One short run on the national graph (built on first use if the cache is empty).

Checks the exact normaliser on a real 57-hop ball against the reference shell search, and that
the evaluation's pieces work at national scale (bundled local authorities, keyed outputs that
the exact distribution gives positive probability).
"""

from __future__ import annotations

import numpy as np
import pytest

from postcode_privacy import Key, Mechanism
from postcode_privacy.graph.shells import iter_node_shells


@pytest.fixture(scope="module")
def national(national_graph):
    return national_graph


def test_national_exact_distribution_and_utility(national):
    from postcode_privacy.evaluate import ExactMechanism, measure_utility
    from postcode_privacy.evaluate.run import area_codes

    mechanism = Mechanism(national, "1")
    exact = ExactMechanism(mechanism)
    leeds = national.index_of("LS1 4AP") if national.find("LS1 4AP") is not None else 0
    # reference normaliser from the plain breadth-first search
    shells = iter_node_shells(national, leeds)
    inside = z = 0
    for h in range(mechanism.radius):
        mass = int(national.prior[next(shells)].sum())
        inside += mass
        z += mechanism.powers[h] * mass
    z += mechanism.powers[mechanism.radius] * (national.total_prior - inside)
    dist = exact.distribution(leeds)
    assert dist.normaliser == z
    assert exact.normaliser(leeds) == z

    key = Key.from_bytes(bytes(range(1, 33)))
    out = national.index_of(mechanism.perturb(key, "subject-1", national.label(leeds)))
    assert exact.probability(leeds, out) > 0

    areas = area_codes(national)
    assert areas.codes is not None and (areas.codes >= 0).mean() > 0.99
    summary = measure_utility(exact, [leeds, out], areas.codes, areas.mass)
    assert 0 < summary.median_displacement_km < 5
    assert 0.5 < summary.same_area_share <= 1
    assert np.isclose(summary.histogram_m.sum(), 1.0)
