"""Exact output distributions of a :class:`~postcode_privacy.Mechanism`, for measurement.

For a true postcode x the mechanism releases y with probability

    K(x)(y) = pi(y) * P[min(d(x, y), R)] / Z(x),

with the mechanism's own integer powers P_0 .. P_R (``Mechanism.powers``) and integer prior, so
every probability here is a ratio of Python integers: nothing is rounded until a number is shown
or plotted.  The ball B(x) of nodes within R - 1 hops is enumerated; every node outside it has the
floor weight P_R * pi(y), so the tail is handled in closed form through per-location totals.

Everything is computed location by location.  Hop distances between nodes follow
``graph/graph.py``: 0 to x itself, 1 to another postcode at x's location, otherwise the hop
distance between locations.  So a location L at location-distance h >= 1 contributes
P_h * m(L) (m = the prior mass at L), and x's own location contributes
P_0 * pi(x) + P_1 * (m(L_x) - pi(x)) (the co-located postcodes are in the tail when R = 1).

Displacements are Euclidean distances between centroids (OSGB36 metres).  Exact expectations
use distances rounded to whole millimetres, so they are exact rational functions of those
rounded distances.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..engine.sweep import LocationSearch
from ..errors import GraphError
from ..graph.compiled import location_masses
from ..mechanism.mechanism import Mechanism

_INT64_MAX = 2**63 - 1
_CACHE_LIMIT = 200_000  # cached normaliser terms per ExactMechanism (a few hundred bytes each)


def _z_order(xy: np.ndarray) -> np.ndarray:
    """Morton (Z-curve) keys of points, for grouping nearby points together."""
    span = np.maximum(xy.max(axis=0) - xy.min(axis=0), 1e-9)
    grid = ((xy - xy.min(axis=0)) / span * 65535).astype(np.uint64)
    key = np.zeros(len(xy), dtype=np.uint64)
    for bit in range(16):
        for axis in range(2):
            key |= ((grid[:, axis] >> np.uint64(bit)) & np.uint64(1)) << np.uint64(2 * bit + axis)
    return key


@dataclass(frozen=True)
class OutputDistribution:
    """K(x) for one true node x: its ball (locations within R - 1 hops) and normaliser Z(x)."""

    node: int
    location: int
    prior: int  # pi(x)
    locations: np.ndarray  # ball locations, breadth-first order; locations[0] is x's own
    hops: np.ndarray  # location hop distance of each ball location (0 .. R - 1)
    ball_mass: int  # pi(B(x)), node-level ball
    normaliser: int  # Z(x), an exact integer


class ExactMechanism:
    """Exact probabilities, expectations and histograms of one mechanism's outputs.

    Precondition: the mechanism's graph is not modified while this object is in use.
    """

    def __init__(self, mechanism: Mechanism):
        if not isinstance(mechanism, Mechanism):
            raise TypeError("mechanism must be a postcode_privacy.Mechanism")
        graph = mechanism.graph
        self.mechanism = mechanism
        self.graph = graph
        self.powers: tuple[int, ...] = mechanism.powers
        self.radius: int = mechanism.radius
        self.total_prior: int = graph.total_prior
        self.loc_mass = location_masses(graph)
        self.search = LocationSearch(graph)
        self._terms: dict[int, tuple[int, int, int]] = {}
        self._coords = graph.location_coordinates

    # -- normalisers ---------------------------------------------------------------------------

    def _location_terms(self, location: int) -> tuple[int, int, int]:
        """(m(L), sum_{h=1}^{R-1} P_h * M_h(L), sum_{h=0}^{R-1} M_h(L)) for a location L,
        with M_h(L) the prior mass of the locations h hops from L."""
        cached = self._terms.get(location)
        if cached is not None:
            return cached
        masses = self.search.shell_masses(location, self.radius - 1, self.loc_mass).tolist()
        inner = sum(self.powers[h] * masses[h] for h in range(1, len(masses)))
        terms = (masses[0], inner, sum(masses))
        if len(self._terms) < _CACHE_LIMIT:
            self._terms[location] = terms
        return terms

    def prepare(self, nodes) -> None:
        """Compute (in batches) the normaliser terms of every location of ``nodes``."""
        locs = np.unique(self.graph.node_location[np.asarray(nodes, dtype=np.int64)])
        todo = [int(v) for v in locs.tolist() if int(v) not in self._terms]
        if not todo:
            return
        if self._coords is not None and len(todo) > 64:
            # Batches of nearby sources share most of their search: order along a Z-curve.
            todo = [todo[i] for i in np.argsort(_z_order(self._coords[todo]), kind="stable")]
        masses = self.search.shell_masses_many(todo, self.radius - 1, self.loc_mass)
        p = self.powers
        for loc, row in zip(todo, masses.tolist()):
            inner = sum(p[h] * row[h] for h in range(1, len(row)))
            if len(self._terms) < _CACHE_LIMIT:
                self._terms[loc] = (row[0], inner, sum(row))

    def _combine(
        self, pi: int, own_mass: int, inner: int, ball_locations_mass: int
    ) -> tuple[int, int]:
        """(Z(x), pi(B(x))) from x's prior and its location's terms."""
        p, r = self.powers, self.radius
        if r >= 2:
            ball = ball_locations_mass
            z = p[0] * pi + p[1] * (own_mass - pi) + inner
        else:  # R = 1: the ball is x alone; co-located postcodes are in the tail
            ball = pi
            z = p[0] * pi
        return z + p[r] * (self.total_prior - ball), ball

    def normaliser(self, node: int) -> int:
        """Z(x) = sum_y pi(y) * P[min(d(x, y), R)], exactly."""
        loc = int(self.graph.node_location[node])
        own, inner, ball_locs = self._location_terms(loc)
        return self._combine(int(self.graph.prior[node]), own, inner, ball_locs)[0]

    def probability(self, truth: int, output: int) -> Fraction:
        """K(x)(y) for one pair of nodes, exactly."""
        return Fraction(
            int(self.graph.prior[output]) * self.powers[self.node_hops(truth, [output])[0]],
            self.normaliser(truth),
        )

    def node_hops(self, source: int, targets) -> list[int]:
        """min(d(source, t), R) for each target node."""
        g, r = self.graph, self.radius
        targets = np.asarray(targets, dtype=np.int64)
        src_loc = int(g.node_location[source])
        locs = g.node_location[targets]
        out = self.search.hops_to(src_loc, r - 1, locs, r)
        same = locs == src_loc
        out[same] = min(1, r)
        out[targets == source] = 0
        return out.tolist()

    # -- distributions ---------------------------------------------------------------------------

    def distribution(self, node: int) -> OutputDistribution:
        """The ball and normaliser of K(x) for node x."""
        g = self.graph
        loc = int(g.node_location[node])
        locs, hops = self.search.ball(loc, self.radius - 1)
        hop_masses = np.zeros(self.radius, dtype=np.int64)
        np.add.at(hop_masses, hops, self.loc_mass[locs])
        masses: list[int] = hop_masses.tolist()  # exact Python integers from here on
        inner = sum(self.powers[h] * masses[h] for h in range(1, len(masses)))
        pi = int(g.prior[node])
        z, ball = self._combine(pi, masses[0], inner, sum(masses))
        if loc not in self._terms and len(self._terms) < _CACHE_LIMIT:
            self._terms[loc] = (masses[0], inner, sum(masses))
        return OutputDistribution(node, loc, pi, locs, hops, ball, z)

    def self_probability(self, dist: OutputDistribution) -> Fraction:
        """K(x)(x): how often x comes back unchanged."""
        return Fraction(self.powers[0] * dist.prior, dist.normaliser)

    def teleport_probability(self, dist: OutputDistribution) -> Fraction:
        """Probability of an output R or more hops away (drawn from the prior)."""
        r = self.radius
        return Fraction(self.powers[r] * (self.total_prior - dist.ball_mass), dist.normaliser)

    def location_weights(self, dist: OutputDistribution) -> list[int]:
        """Integer weight of each ball location (same order as ``dist.locations``): its share of
        K(x) is weight / Z(x)."""
        p, r = self.powers, self.radius
        masses = self.loc_mass[dist.locations].tolist()
        weights = [p[h] * m for h, m in zip(dist.hops.tolist(), masses)]
        co_located = masses[0] - dist.prior
        weights[0] = p[0] * dist.prior + (p[1] if r >= 2 else p[r]) * co_located
        return weights

    def location_probabilities(self, dist: OutputDistribution) -> np.ndarray:
        """K(x) summed over each ball location, converted to float for plotting."""
        return np.array([float(Fraction(w, dist.normaliser)) for w in self.location_weights(dist)])

    def ball_nodes(self, dist: OutputDistribution) -> tuple[np.ndarray, np.ndarray]:
        """(nodes, node hop distances) of the ball B(x): every node within R - 1 hops."""
        g = self.graph
        ip, flat = g.members_indptr, g.members_flat
        starts, ends = ip[dist.locations], ip[dist.locations + 1]
        counts = ends - starts
        idx = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        nodes = flat[idx + np.arange(int(counts.sum()))].astype(np.int64)
        hops = np.repeat(dist.hops, counts)
        own = nodes == dist.node
        hops[(hops == 0) & ~own] = 1
        if self.radius == 1:
            keep = own
            nodes, hops = nodes[keep], hops[keep]
        return nodes, hops

    # -- displacement ----------------------------------------------------------------------------

    def _require_coordinates(self) -> np.ndarray:
        if self._coords is None:
            raise GraphError(
                "this graph carries no coordinates, so displacements cannot be measured"
            )
        return self._coords

    def distances_m(self, location: int) -> np.ndarray:
        """Euclidean distance in metres from ``location`` to every location (float64)."""
        xy = self._require_coordinates()
        d = xy - xy[location]
        return np.hypot(d[:, 0], d[:, 1])

    def expected_displacement_m(
        self, dist: OutputDistribution, distances: np.ndarray | None = None
    ) -> Fraction:
        """E[distance(x, output)] in metres, exact for distances rounded to the millimetre."""
        if distances is None:
            distances = self.distances_m(dist.location)
        mm = np.rint(distances * 1000.0).astype(np.int64)
        mass = self.loc_mass
        if mm.size and int(mm.max()) * self.total_prior <= _INT64_MAX:
            everywhere = int(np.dot(mass, mm))
            ball_terms = mass[dist.locations] * mm[dist.locations]
            hop_terms = np.zeros(self.radius, dtype=np.int64)
            np.add.at(hop_terms, dist.hops, ball_terms)
            per_hop: list[int] = hop_terms.tolist()
        else:  # exact Python integers when int64 could overflow
            everywhere = sum(int(a) * int(b) for a, b in zip(mass.tolist(), mm.tolist()))
            per_hop = [0] * self.radius
            for loc, h in zip(dist.locations.tolist(), dist.hops.tolist()):
                per_hop[h] += int(mass[loc]) * int(mm[loc])
        p, r = self.powers, self.radius
        # x's own location is at distance 0, so its (special) weights contribute nothing.
        numerator = sum(p[h] * per_hop[h] for h in range(1, r))
        numerator += p[r] * (everywhere - sum(per_hop))
        return Fraction(numerator, dist.normaliser * 1000)

    def location_probabilities_everywhere(self, dist: OutputDistribution) -> np.ndarray:
        """K(x) summed over every location of the graph (float64, for histograms)."""
        z, p, r = dist.normaliser, self.powers, self.radius
        factors = np.array([float(Fraction(p[h], z)) for h in range(r + 1)])
        out = self.loc_mass.astype(np.float64) * factors[r]
        out[dist.locations] = self.loc_mass[dist.locations].astype(np.float64) * factors[dist.hops]
        out[dist.location] = float(Fraction(self.location_weights(dist)[0], z))
        return out

    def add_displacement_histogram(
        self,
        dist: OutputDistribution,
        histogram: np.ndarray,
        distances: np.ndarray | None = None,
        weight: float = 1.0,
    ) -> None:
        """Add ``weight`` * K(x) to ``histogram``, binned by whole metres of displacement."""
        if distances is None:
            distances = self.distances_m(dist.location)
        bins = np.minimum(distances.astype(np.int64), histogram.size - 1)
        probs = self.location_probabilities_everywhere(dist)
        histogram += weight * np.bincount(bins, weights=probs, minlength=histogram.size)

    def max_distance_m(self) -> float:
        """An upper bound on any displacement: the diagonal of the coordinates' bounding box."""
        xy = self._require_coordinates()
        span = xy.max(axis=0) - xy.min(axis=0)
        return float(np.hypot(span[0], span[1]))

    # -- local authority ------------------------------------------------------------------------

    def same_area_probability(
        self, dist: OutputDistribution, area: np.ndarray, area_mass: np.ndarray
    ) -> Fraction | None:
        """Probability that the output lies in the same area (e.g. local authority) as x.

        ``area`` gives a non-negative integer code per node, -1 where unknown; ``area_mass`` the
        total prior of each code.  None when x's own area is unknown.
        """
        own = int(area[dist.node])
        if own < 0:
            return None
        nodes, hops = self.ball_nodes(dist)
        same = area[nodes] == own
        hop_prior = np.zeros(self.radius, dtype=np.int64)
        np.add.at(hop_prior, hops[same], self.graph.prior[nodes[same]])
        per_hop: list[int] = hop_prior.tolist()
        p, r = self.powers, self.radius
        numerator = sum(p[h] * per_hop[h] for h in range(r))
        numerator += p[r] * (int(area_mass[own]) - sum(per_hop))
        return Fraction(numerator, dist.normaliser)
