"""A second, deliberately plain implementation of docs/spec.md, used to confirm test vectors.

It shares no code with ``postcode_privacy``: its own powers, stream, breadth-first search and
shell choice (with ``Fraction`` and a fully computed normaliser instead of lazy bounds).  If the
library and this file agree on the golden vectors, the vectors describe the spec, not a bug.
"""

from __future__ import annotations

import hashlib
import hmac
from decimal import ROUND_HALF_EVEN, Context, Decimal
from fractions import Fraction


def q_hat(epsilon: str) -> Fraction:
    ctx = Context(prec=60, rounding=ROUND_HALF_EVEN, Emin=-(10**6), Emax=10**6)
    half = Context(prec=100).divide(Decimal(epsilon), 2)  # exact, whatever the ambient context
    r = ctx.exp(half.copy_negate())
    upper = Fraction(r) + Fraction(10) ** (r.adjusted() - 59)
    scaled = upper * 2**256
    numerator = scaled.numerator // scaled.denominator + (
        scaled.numerator % scaled.denominator != 0
    )
    return Fraction(numerator, 2**256)


def powers(epsilon: str, radius: int) -> list[int]:
    q = q_hat(epsilon)
    s = 80
    while True:
        p = [2**s]
        for _ in range(radius):
            v = q * p[-1]
            p.append(v.numerator // v.denominator + (v.numerator % v.denominator != 0))
        if p[-1] >= 2**80:
            return p
        s += 1


def _field(b: bytes) -> bytes:
    return len(b).to_bytes(4, "big") + b


def block(key: bytes, context: list[bytes], label: bytes, index: int, counter: int) -> bytes:
    msg = b"".join(_field(f) for f in context)
    msg += _field(label) + _field(index.to_bytes(8, "big")) + _field(counter.to_bytes(8, "big"))
    return hmac.new(key, msg, hashlib.sha256).digest()


def uniform_int(key, context, n, label, index=0):
    if n == 1:
        return 0
    k = (n - 1).bit_length()
    c = 0
    while True:
        v = int.from_bytes(block(key, context, label, index, c), "big") >> (256 - k)
        if v < n:
            return v
        c += 1


def distances(nodes, adjacency, source):
    """Plain BFS over the node graph (co-located postcodes given as explicit cliques)."""
    dist = {source: 0}
    frontier = [source]
    while frontier:
        nxt = []
        for v in frontier:
            for w in adjacency[v]:
                if w not in dist:
                    dist[w] = dist[v] + 1
                    nxt.append(w)
        frontier = nxt
    return dist


def perturb(
    key: bytes,
    version: str,
    graph_sha: str,
    epsilon: str,
    radius: int,
    nodes: list[str],
    adjacency: dict,
    prior: dict,
    subject: str,
    postcode: str,
) -> str:
    p = powers(epsilon, radius)
    context = [
        b"postcode-privacy/draw/v1",
        version.encode(),
        graph_sha.encode(),
        epsilon.encode(),
        str(radius).encode(),
        subject.encode(),
        postcode.encode(),
    ]
    dist = distances(nodes, adjacency, postcode)
    shells = [[y for y in nodes if dist.get(y) == h] for h in range(radius)]
    total = sum(prior.values())
    weights = [p[h] * sum(prior[y] for y in shells[h]) for h in range(radius)]
    inside = sum(prior[y] for sh in shells for y in sh)
    z = sum(weights) + p[radius] * (total - inside)

    # U's first 256 * m bits, extended until the comparison with each C_h / Z is decided.
    def bits(m):
        u = 0
        for c in range(m):
            u = (u << 256) | int.from_bytes(block(key, context, b"shell", 0, c), "big")
        return u

    chosen, cumulative = radius, 0
    for h in range(radius):
        cumulative += weights[h]
        m = 1
        while True:
            u, k = bits(m), 256 * m
            if Fraction(u + 1, 2**k) <= Fraction(cumulative, z):
                below = True
                break
            if Fraction(u, 2**k) >= Fraction(cumulative, z):
                below = False
                break
            m += 1
        if below:
            chosen = h
            break
    if chosen < radius:
        shell = shells[chosen]
        j = uniform_int(key, context, sum(prior[y] for y in shell), b"member")
        for y in shell:
            if j < prior[y]:
                return y
            j -= prior[y]
    attempt = 0
    while True:
        j = uniform_int(key, context, total, b"tail", attempt)
        for y in nodes:
            if j < prior[y]:
                break
            j -= prior[y]
        if dist.get(y, radius) >= radius:
            return y
        attempt += 1
