"""Small postcode-labelled graphs with coordinates for the evaluation, report and calibration
tests, and checks that the generator produces what those tests rely on."""

from __future__ import annotations

import numpy as np

from postcode_privacy.graph.build import build_graph
from postcode_privacy.postcodes import try_normalise

UNIT_LETTERS = "ABDEFGHJLNPQRSTUWXYZ"


def postcode_graph(
    n: int = 240,
    seed: int = 0,
    districts=("AB1", "AB2", "CD3", "CD4"),
    colocated: int = 6,
    prior_high: int = 20,
    span_m: float = 8000.0,
):
    """A Delaunay graph of ``n`` random points labelled as real-form postcodes.

    District by quadrant (in ``districts`` order: SW, SE, NW, NE), sector digit by a 3 x 3 split
    of each quadrant, so sectors and districts are spatially coherent, as in the real data.
    ``colocated`` points are copied onto others (postcodes sharing a centroid).  Returns the
    graph and a local-authority code per node (west half "E0001", east half "E0002").
    """
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, span_m, size=(n, 2)).round()
    for i in range(colocated):
        xy[n - 1 - i] = xy[i]
    half = span_m / 2
    labels = []
    counters: dict[str, int] = {}
    for x, y in xy:
        q = int(x >= half) + 2 * int(y >= half)
        sx = min(2, int((x % half) / (half / 3)))
        sy = min(2, int((y % half) / (half / 3)))
        prefix = f"{districts[q]} {sx + 3 * sy}"
        k = counters.get(prefix, 0)
        counters[prefix] = k + 1
        labels.append(prefix + UNIT_LETTERS[k // 20] + UNIT_LETTERS[k % 20])
    prior = rng.integers(1, prior_high + 1, size=n)
    graph = build_graph(labels, xy[:, 0], xy[:, 1], prior)
    by_label = {label: "E0001" if x < half else "E0002" for label, (x, _) in zip(labels, xy)}
    laua = np.array([by_label[label] for label in graph.postcodes], dtype=object)
    return graph, laua


def test_generator_makes_valid_postcodes_and_colocations():
    graph, laua = postcode_graph(120, seed=3, colocated=4)
    assert len(graph) == 120
    assert all(try_normalise(p) == p for p in graph.postcodes)
    assert graph.n_locations == 116
    assert set(laua) == {"E0001", "E0002"}


def test_generator_is_deterministic():
    a, _ = postcode_graph(80, seed=5)
    b, _ = postcode_graph(80, seed=5)
    c, _ = postcode_graph(80, seed=6)
    assert a.sha256 == b.sha256 != c.sha256
