"""The mechanism: a graph, an exact epsilon and a radius, turning true postcodes into released ones."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from fractions import Fraction

import numpy as np

from ..errors import (
    InvalidParameterError,
    SubjectIdError,
    TeleportWarning,
    UnknownPostcodeError,
    option_name,
    warn_at_caller,
)
from ..graph.graph import Graph
from ..graph.shells import hop_distances, iter_node_shells
from ..version import OUTPUT_STABILITY_VERSION, __version__
from .epsilon import Epsilon, parse_epsilon
from .keys import Key
from .powers import MAX_RADIUS, powers
from .probabilities import Probabilities
from .radius import TELEPORT_TARGET, bound_text, default_radius, teleport_bound
from .sampler import sample
from .stream import StreamContext
from .subject import canonical_subject_id


class Mechanism:
    """K(x)(y) proportional to prior(y) * P[min(d(x, y), R)], sampled exactly and keyed.

    Satisfies epsilon * min(d, R)-privacy (docs/methods.md, "The guarantee") for the exact
    decimal epsilon given, with no correction: the powers are rounded on the safe side.
    """

    def __init__(self, graph: Graph, epsilon: object, radius: int | None = None) -> None:
        if not isinstance(graph, Graph):
            raise TypeError("graph must be a postcode_privacy.Graph")
        self.graph = graph
        self.epsilon: Epsilon = parse_epsilon(epsilon)
        min_prior = int(graph.prior.min())
        if radius is None:
            self.radius = default_radius(self.epsilon, min_prior, graph.total_prior)
        else:
            if isinstance(radius, bool) or not isinstance(radius, (int, np.integer)):
                raise InvalidParameterError(f"{option_name('radius')} must be a whole number")
            if not 1 <= int(radius) <= MAX_RADIUS:
                raise InvalidParameterError(
                    f"{option_name('radius')} must be from 1 to {MAX_RADIUS}"
                )
            self.radius = int(radius)
        self.powers: tuple[int, ...] = powers(self.epsilon, self.radius)
        self.teleport_bound: Fraction = teleport_bound(
            self.epsilon, self.radius, min_prior, graph.total_prior
        )
        if radius is not None and self.teleport_bound > TELEPORT_TARGET:
            default = self.default_radius
            if default is None:
                hint = "no radius within the supported range meets it at this epsilon"
            else:
                hint = f"the default radius at this epsilon is {default}"
            warn_at_caller(
                f"radius {self.radius} gives a teleport probability bound of "
                f"{bound_text(self.teleport_bound)}, above the 1e-06 target; {hint}",
                TeleportWarning,
            )

    @functools.cached_property
    def default_radius(self) -> int | None:
        """The radius the teleport target sets at this epsilon on this graph, or None when no
        radius in range meets it; the report says whether a release used it.  Computed when
        asked: at a small epsilon it takes a good part of a second, which a mechanism given
        its radius (each Spark partition's) need not spend."""
        try:
            return default_radius(self.epsilon, int(self.graph.prior.min()), self.graph.total_prior)
        except InvalidParameterError:
            return None

    def __repr__(self) -> str:
        return f"<Mechanism epsilon={self.epsilon.text} radius={self.radius} graph={self.graph.sha256[:12]}…>"

    # -- exact quantities, for verification and reports ------------------------------------------

    def weights(self, postcode: str) -> list[int]:
        """The exact integer weight pi(y) * P[min(d(x, y), R)] of every node y, in graph order."""
        x = self.graph.index_of(postcode)
        distance = hop_distances(self.graph, x, self.radius)
        return [
            int(pi) * self.powers[int(d)]
            for pi, d in zip(self.graph.prior.tolist(), distance.tolist())
        ]

    def probabilities(self, postcode: str) -> Probabilities:
        """K(x)(y) for every node y, as exact fractions in graph order (small graphs only).

        The result is a list of Fractions that prints as a table of postcode, hops and decimal
        probability (see :mod:`.probabilities`); ``.exact`` gives the plain list.
        """
        x = self.graph.index_of(postcode)
        hops = hop_distances(self.graph, x, self.radius).tolist()
        w = [int(pi) * self.powers[int(d)] for pi, d in zip(self.graph.prior.tolist(), hops)]
        total = sum(w)
        return Probabilities(
            self.graph.label(x), [Fraction(v, total) for v in w], self.graph.postcodes, hops
        )

    def teleport_probability(self, postcode: str) -> Fraction:
        """Exact probability that the output is drawn from the tail (R hops or more away)."""
        x = self.graph.index_of(postcode)
        shells = iter_node_shells(self.graph, x)
        inside, z = 0, 0
        for h in range(self.radius):
            mass = int(self.graph.prior[next(shells)].sum(dtype=np.int64))
            inside += mass
            z += self.powers[h] * mass
        tail = self.powers[self.radius] * (self.graph.total_prior - inside)
        return Fraction(tail, z + tail)

    def identity(self) -> dict[str, object]:
        """Which release this mechanism makes, as every machine-readable output states it.

        The manifest, ``evaluate`` and ``report`` all carry this block, so a reader can tell
        whether two files describe the same draws: together with the key's fingerprint these
        are the output-defining inputs of docs/threat-model.md, "When repeated releases count as
        one".
        """
        return {
            "library_version": __version__,
            "output_stability_version": OUTPUT_STABILITY_VERSION,
            "graph_sha256": self.graph.sha256,
            "graph_postcodes": len(self.graph),
            "epsilon": self.epsilon.text,
            "radius": self.radius,
        }

    # -- sampling ----------------------------------------------------------------------------

    def stream_context(self, key: Key) -> StreamContext:
        if not isinstance(key, Key):
            raise TypeError("key must be a postcode_privacy.Key")
        return StreamContext(
            key,
            stability_version=OUTPUT_STABILITY_VERSION,
            graph_sha256=self.graph.sha256,
            epsilon_text=self.epsilon.text,
            radius=self.radius,
        )

    def _draw(
        self, context: StreamContext, subject_id: object, node: int, *, lazy: bool = True
    ) -> int:
        return self._draw_canonical(context, canonical_subject_id(subject_id), node, lazy=lazy)

    def _draw_canonical(
        self, context: StreamContext, sid: str, node: int, *, lazy: bool = True
    ) -> int:
        stream = context.for_subject(sid, self.graph.label(node))
        g = self.graph
        return sample(
            stream,
            iter_node_shells(g, node),
            g.prior,
            g.prior_cumsum,
            g.total_prior,
            self.powers,
            self.radius,
            lazy=lazy,
        )

    def perturb(self, key: Key, subject_id: object, postcode: str) -> str:
        """The released postcode for this subject: deterministic given key and inputs."""
        node = self.graph.index_of(postcode)
        return self.graph.label(self._draw(self.stream_context(key), subject_id, node))

    def perturb_many(
        self, key: Key, subject_ids: Iterable[object], postcodes: Iterable[str]
    ) -> list[str]:
        """``perturb`` for many records, with the core's lazy sampler one record at a time.

        The core does not depend on the batch engine.  For large batches use
        ``postcode_privacy.engine.perturb_many(mechanism, ...)``, which gives identical outputs
        much faster (docs/performance.md).
        """
        context = self.stream_context(key)
        sids, nodes = self._records(subject_ids, postcodes)
        return [self.graph.label(self._draw_canonical(context, s, x)) for s, x in zip(sids, nodes)]

    def _records(
        self, subject_ids: Iterable[object], postcodes: Iterable[str]
    ) -> tuple[list[str], list[int]]:
        """Canonical identifiers and nodes; an error names the position (from 0) of the first
        record refused, never its value."""
        ids, codes = list(subject_ids), list(postcodes)
        if len(ids) != len(codes):
            raise InvalidParameterError("subject_ids and postcodes differ in length")
        sids, nodes = [], []
        for position, (subject_id, postcode) in enumerate(zip(ids, codes)):
            try:
                nodes.append(self.graph.index_of(postcode))
            except UnknownPostcodeError as exc:
                raise UnknownPostcodeError(f"postcodes[{position}]: {exc}") from None
            try:
                sids.append(canonical_subject_id(subject_id))
            except SubjectIdError as exc:
                raise SubjectIdError(f"subject_ids[{position}]: {exc}") from None
        return sids, nodes

    def perturb_reference(
        self, key: Key, subject_ids: Sequence[object], postcodes: Sequence[str]
    ) -> list[str]:
        """The straightforward full-ball sampler, kept as the reference for faster paths."""
        context = self.stream_context(key)
        sids, nodes = self._records(subject_ids, postcodes)
        return [
            self.graph.label(self._draw_canonical(context, s, x, lazy=False))
            for s, x in zip(sids, nodes)
        ]
