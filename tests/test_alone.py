"""Records alone at their postcode, decided and drawn together (engine/alone.py).

The compiled decision must be ``_sample_one``'s exactly: the same limb sums as Python's
integers, the same answer as ``bounds.decide_all`` on any bounds, the same records settled (no
fewer, no more) with the same shell, and through the engine the reference sampler's outputs,
with a table or far-mass rows that disagree with the graph refused as before.  The national
graph's records alone are checked against the reference in test_profiles.py
(``test_national_profiles_and_draws_equal_the_reference``).
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from test_fast_path import planar_graph
from test_profiles import loc_mass

from postcode_privacy import Graph, Key, Mechanism
from postcode_privacy.engine import FastSampler, cluster_balls, perturb_many
from postcode_privacy.engine import alone as alone_module
from postcode_privacy.engine import bounds as bounds_module
from postcode_privacy.engine import fast as fast_module
from postcode_privacy.engine import profiles as engine_profiles
from postcode_privacy.mechanism.sampler import MEMBER, SHELL
from postcode_privacy.mechanism.subject import canonical_subject_id

digits = alone_module._digits


def value(row: np.ndarray) -> int:
    """The integer whose 32-bit digits (least significant first) are ``row``."""
    return sum(int(d) << (32 * k) for k, d in enumerate(row.tolist()))


def _big(rng: random.Random, bits: int) -> int:
    """A random integer of up to ``bits`` bits, often with long runs of ones or zeros."""
    kind = rng.randrange(4)
    if kind == 0:
        return (1 << rng.randrange(bits + 1)) - 1  # all ones: carries ripple through
    if kind == 1:
        return 1 << rng.randrange(bits)
    return rng.getrandbits(rng.randrange(1, bits + 1))


def _rows(*numbers: int, width: int) -> np.ndarray:
    """Numbers as rows of ``width`` 32-bit digits."""
    return np.stack([digits(n, width) for n in numbers])


def test_limb_sums_products_and_comparisons_equal_python_integers():
    rng = random.Random(11)
    for _ in range(3000):
        width = rng.randrange(3, 9)
        a, b = _big(rng, 32 * width - 66), _big(rng, 32 * width - 66)
        m = _big(rng, 62)
        out = _rows(0, a, width=width)
        powers = _rows(1, b, width=width - 2)
        assert alone_module._set_sum(out, 0, out, 1, powers, 1, m)
        assert value(out[0]) == a + b * m and value(out[1]) == a
        assert alone_module._set_sum(out, 1, out, 1, powers, 1, m)  # in place
        assert value(out[1]) == a + b * m
        out = _rows(a, b, width=width)
        assert alone_module._add_row(out, 0, out, 1)
        assert value(out[0]) == a + b
        product = np.zeros((1, 2 * width), dtype=np.uint64)
        alone_module._multiply(product, _rows(a, width=width), 0, _rows(0, b, width=width), 1)
        assert value(product[0]) == a * b
        shift = rng.randrange(3)
        wide = _rows(b << (32 * shift), width=width + 1 + shift)
        assert alone_module._compare(_rows(a, width=width), 0, wide, 0, shift) == (a > b) - (a < b)
        same = _rows(a << (32 * shift), width=width + 2 + shift)
        assert alone_module._compare(_rows(a, width=width), 0, same, 0, shift) == 0
        # every digit in use, on either side, the wider or not
        c, d = _big(rng, 32 * width), _big(rng, 32 * (width + 1))
        if rng.random() < 0.3:
            d = c if rng.random() < 0.5 else c + rng.choice([-1, 1]) * (d % 2**32)
            d = max(d, 0)
        narrow, wide = _rows(c, width=width), _rows(d << (32 * shift), width=width + 1 + shift)
        assert alone_module._compare(narrow, 0, wide, 0, shift) == (c > d) - (c < d)
        shifted = d << (32 * shift)  # wide[0] as a number, against c = the other's [shift:]
        other = _rows(c << (32 * shift), width=width + shift)
        assert alone_module._compare(wide, 0, other, 0, shift) == (shifted > c) - (shifted < c)

    # a carry out of the top digit is reported, never dropped
    def full():
        return _rows((1 << 64) - 1, 1, width=2)

    assert not alone_module._add_row(full(), 0, full(), 1)
    assert not alone_module._set_sum(full(), 0, full(), 0, _rows(1, width=1), 0, 1)
    assert not alone_module._set_sum(full(), 0, full(), 0, _rows(1, width=1), 0, 1 << 62)
    assert not alone_module._set_sum(full(), 1, full(), 1, _rows(1, width=2), 0, 1)  # too wide
    assert not alone_module._set_sum(full(), 1, full(), 1, _rows(1, width=1), 0, -1)  # negative


def test_the_compiled_decision_is_decide_alls():
    """``alone._decide`` answers as ``bounds.decide_all`` on random bounds and on U placed at
    and around every boundary C_i / Z, with the powers' sizes of real mechanisms."""
    rng = random.Random(12)
    top = 1 << 256
    seen = {"shell": 0, "tail": 0, "undecided": 0}
    for _ in range(600):
        radius = rng.randint(1, 8)
        depth = rng.randint(0, radius - 1)
        scale = rng.choice([1, 2**40, 2**120, 2**300])
        weights = [
            rng.choice([0, scale, rng.randrange(1, 2**20) * scale]) for _ in range(depth + 1)
        ]
        cumulative = np.cumsum(np.array(weights, dtype=object)).tolist()
        z_low = cumulative[-1] + rng.choice([0, 1, rng.randrange(1, 2**18) * scale])
        exact = depth == radius - 1
        z_high = z_low if exact else z_low + rng.choice([0, 1, rng.randrange(2**18) * scale])
        if z_low == 0:
            continue
        width = -(-max(z_high, 1).bit_length() // 32) + 1
        us = [rng.randrange(top), 0, top - 1]
        for c in cumulative:
            for z in (z_low, z_high):
                edge = (c * top) // z
                us += [max(0, min(top - 1, edge + d)) for d in (-1, 0, 1)]
        shells, undecided = bounds_module.decide_all(cumulative, us, z_low, z_high, radius)
        table = _rows(*cumulative, width=width)
        bounds = _rows(z_low, z_high, 0, 0, width=width)
        product = np.zeros((1, width + 9), dtype=np.uint64)
        for r, u in enumerate(us):
            got = alone_module._decide(
                table, depth, bounds, _rows(u, u + 1, width=9), product, radius
            )
            want = bounds_module.UNDECIDED if r in undecided else shells[r]
            assert got == want, (cumulative, z_low, z_high, u)
            seen["undecided" if got < 0 else "tail" if got == radius else "shell"] += 1
    assert all(seen.values()), seen


def test_the_compiled_row_tail_is_row_tails():
    """``alone._row_tail`` equals ``bounds.row_tail`` (None: unusable) on random rows of every
    depth against the start and the radius, non-decreasing or not, within [0, total] or
    not, and rows whose int64 differences would wrap past -2**63."""
    rng = random.Random(13)
    seen = {"usable": 0, "unusable": 0}
    for _ in range(4000):
        radius = rng.randint(2, 12)
        start = rng.randint(2, radius)
        total = rng.choice([2**62, rng.randrange(1, 2**40)])
        powers = sorted((rng.randrange(2**80, 2**130) for _ in range(radius + 1)), reverse=True)
        far_depth = rng.randint(0, radius + 2)
        row = sorted(rng.randrange(0, total + 1) for _ in range(far_depth + 1))
        kind = rng.randrange(5)
        j = rng.randrange(far_depth + 1)
        if kind == 1:  # decreasing somewhere
            row[j] = max(row[j] - rng.randrange(1, 3), -5)
        elif kind == 2:  # above the total somewhere, then on
            row[j:] = [total + 1] * (far_depth + 1 - j)
        elif kind == 3 and far_depth >= start + 2:  # through -2**63 and back: wraps in int64
            at = rng.randint(start, far_depth - 2)
            row[at : at + 3] = [-(2**63), -(2**62) - 1, 0]
        balls = np.array([row], dtype=np.int64)
        full = np.full(radius, total, dtype=np.int64)  # ClusterBalls.upper_row
        full[: min(radius, far_depth + 1)] = balls[0, : min(radius, far_depth + 1)]
        want = bounds_module.row_tail(full, start, tuple(powers), radius, total)
        if full[start - 1] < 0:  # a tail Python computes, but never uses: Q[D+1] is below any
            want = None  # explored mass, so ``bounds.z_high_by_tail`` refuses the row
        width = -(-(130 + 64 + 8) // 32)
        tails = np.zeros((1, width), dtype=np.uint64)
        digits_of_powers = _rows(*powers, width=5)
        got = alone_module._row_tail(
            tails, 0, balls, far_depth, start, radius, digits_of_powers, total
        )
        if want is None:
            assert not got, (row, start, radius, far_depth)
        else:
            assert got and value(tails[0]) == want, (row, start, radius, far_depth)
        seen["unusable" if want is None else "usable"] += 1
    assert min(seen.values()) > 500, seen


def _python_decision(sampler: FastSampler, node: int, block: int):
    """What ``_sample_one`` decides for a record at ``node`` whose first "shell" block is
    ``block``, before drawing: (shell, stat), or None where it hands the record on."""
    sampler.sources.forget_group_rows()
    for stat, bracket in sampler.sources.brackets_for(node, with_floor=False):
        (shell,), undecided = bounds_module.decide_all(
            bracket.cumulative, [block], bracket.z_low, bracket.z_high, sampler.radius
        )
        if not undecided:
            masses = sampler.sources.table_masses
            if masses is None or shell >= len(masses):
                return None
            return shell, stat
    return None


def _boundary_blocks(sampler: FastSampler, node: int) -> list[int]:
    """Blocks u placing U at and around every boundary C_i / z of every bound on Z that
    ``_sample_one`` tries at ``node``: where a bound one unit off would answer otherwise."""
    top = 1 << 256
    blocks = []
    sampler.sources.forget_group_rows()
    for _, bracket in sampler.sources.brackets_for(node, with_floor=False):
        for c in bracket.cumulative:
            for z in (bracket.z_low, bracket.z_high):
                edge = c * top // z
                blocks += [max(0, min(top - 1, edge + d)) for d in (-1, 0, 1)]
    return blocks


@pytest.fixture
def small_clusters(monkeypatch):
    """Far-mass rows of clusters of at most 3 locations, 1 hop across, to 30 hops: many
    clusters and rows of every kind on a generated graph of a few hundred locations."""
    monkeypatch.setattr(cluster_balls, "SIZE", 3)
    monkeypatch.setattr(cluster_balls, "HOPS", 1)
    monkeypatch.setattr(cluster_balls, "DEPTH", 30)


def _generated_case(rng: random.Random, wrong: str | None = None):
    """A generated graph, a mechanism (default radius, or a small one with many tail draws),
    a profile table short of the graph's reach or past the radius, and far-mass rows (often)
    whose depth is cut at the boundaries the decision reads (D, D + 1, R - 1, ...), some of
    them made unusable (above the total prior, or decreasing) past the table."""
    graph = planar_graph(rng, rng.randrange(150, 250), 260, 1.0, rng.choice([8, 30]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # small radii: TeleportWarning
        radius = rng.choice([None, None, None, 2, 3, 5])
        mechanism = Mechanism(graph, rng.choice(["0.5", "1", "2", "3.5"]), radius=radius)
    radius = mechanism.radius
    depth = rng.choice([1, 2, 3, 4, 40])
    built = engine_profiles.build_profiles(graph, loc_mass(graph), depth)
    table = engine_profiles.BallProfiles(built, graph)
    if rng.random() < 0.8:
        balls, cluster_of = cluster_balls.build_cluster_balls(graph, loc_mass(graph))
        d = min(depth, radius - 1)
        cut = rng.choice([d, d + 1, d + 2, radius - 2, radius - 1, radius, 30])
        balls = np.ascontiguousarray(balls[:, : min(max(cut, 1), 30) + 1])
        if wrong == "rows":  # too light within the table's depth only, where the guard sees it
            balls[:, 1 : depth + 1] = balls[:, :1]
        elif rng.random() < 0.3 and balls.shape[1] > d + 2:
            unusable = rng.sample(range(balls.shape[0]), balls.shape[0] // 2)
            j = rng.randrange(d + 2, balls.shape[1])
            if rng.random() < 0.5:  # above the total prior: an upper bound, but not usable
                balls[unusable, j:] = graph.total_prior + 1
            else:  # decreasing past the table: refused by _row_tail
                balls[unusable, j] = balls[unusable, j - 1] - 1
        table.far = cluster_balls.ClusterBalls(balls, cluster_of, graph)
    if wrong == "table":
        built[:, 1:] += 1
    elif wrong == "decreasing":  # a ball lighter than the one inside it: a negative mass
        k = rng.randint(1, min(depth, 4))
        built[:, k] = 0 if k == 1 else built[:, k - 1] - 1
    return graph, mechanism, table


@pytest.mark.slow  # many records one at a time: over a second
def test_records_alone_settle_exactly_as_one_at_a_time(small_clusters):
    """On generated graphs, tables of several depths, rows of several depths, usable or not,
    small radii with tail draws: the compiled decision settles exactly the records
    ``_sample_one`` settles, with the same shell and the same statistic, and ``sample_each``
    draws what ``sample_group`` draws, with the same statistics."""
    rng = random.Random(44)
    counts = {"profile_hits": 0, "row_hits": 0, None: 0}
    tails = 0
    for _ in range(60):
        graph, mechanism, table = _generated_case(rng)
        key = Key.from_bytes(rng.randbytes(32))
        context = mechanism.stream_context(key)
        nodes = rng.sample(range(len(graph)), 60)
        ids = [canonical_subject_id(f"s{rng.randrange(10**6)}") for _ in nodes]
        one = FastSampler(mechanism, profiles=table)
        labels = graph.labels_of(np.array(nodes))
        shell_blocks, member_blocks = context.first_block_bytes(ids, labels, (SHELL, MEMBER))
        blocks = [int.from_bytes(shell_blocks[32 * r : 32 * r + 32], "big") for r in range(60)]
        records = list(zip(nodes, blocks))
        for v in nodes[:5]:  # and U at every boundary: the bounds must be exactly the same
            records += [(v, u) for u in _boundary_blocks(one, v)]
        want = [_python_decision(one, v, u) for v, u in records]
        decider = alone_module.AloneDecider(
            mechanism.powers, mechanism.radius, table, table.far, graph
        )
        shells, stages, _, _ = decider.decide(
            np.array([v for v, _ in records]),
            b"".join(u.to_bytes(32, "big") for _, u in records),
            rng.randbytes(32 * len(records)),
        )
        stat_of = {1: "profile_hits", 2: "row_hits"}
        got = [None if h < 0 else (int(h), stat_of[int(s)]) for h, s in zip(shells, stages)]
        assert got == want
        for decision in want:
            counts[None if decision is None else decision[1]] += 1
        each = FastSampler(mechanism, profiles=table)
        groups = [(v, [s]) for v, s in zip(nodes, ids)]
        one_by_one = [one.sample_group(context, v, [s]) for v, [s] in groups]
        assert each.sample_each(context, groups) == one_by_one
        assert each.stats == one.stats
        tails += one.stats["tail"]
    assert min(counts.values()) > 100 and tails > 20, (counts, tails)


def test_records_alone_beside_split_groups_brackets_and_late_rows(small_clusters, monkeypatch):
    """Records alone in a run with larger groups, the pieces of a split group (whose first
    piece keeps a bracket the next must use) and postcodes with kept brackets: the outputs
    and every statistic are ``sample_group``'s. Rows given to the table after the sampler
    was made are not read by either (the sampler keeps the rows it was made with)."""
    monkeypatch.setattr(fast_module, "BRACKET_MIN_RECORDS", 3)
    rng = random.Random(47)
    hits = 0
    for _ in range(25):
        graph, mechanism, table = _generated_case(rng)
        far, table.far = table.far, None
        context = mechanism.stream_context(Key.from_bytes(rng.randbytes(32)))
        nodes = rng.sample(range(len(graph)), 40)
        groups = []
        for i, v in enumerate(nodes):
            size = rng.choice([1, 1, 1, 4]) if i % 7 else 4
            groups.append((v, [canonical_subject_id(f"{v}-{k}") for k in range(size)]))
            if i % 7 == 0:  # a second piece of the same postcode
                groups.append((v, [canonical_subject_id(f"{v}-again")]))
        kept: dict = {}
        one = FastSampler(mechanism, profiles=table, brackets=kept)
        each = FastSampler(mechanism, profiles=table, brackets=dict(kept))
        table.far = far  # too late for both samplers
        want = [one.sample_group(context, v, ids) for v, ids in groups]
        assert each.sample_each(context, groups) == want
        assert each.stats == one.stats
        again = rng.sample(groups, 20)  # a later batch: kept brackets settle their postcodes
        singles = [(v, ids[:1]) for v, ids in again]
        want = [one.sample_group(context, v, ids) for v, ids in singles]
        assert each.sample_each(context, singles) == want
        assert each.stats == one.stats
        hits += one.stats["bracket_hits"]
    assert hits > 20


@pytest.mark.parametrize("wrong", ["table", "rows", "decreasing"])
def test_records_alone_refuse_a_table_or_rows_that_disagree(wrong, small_clusters):
    """A table whose balls are wrong (heavier, or lighter than the ball inside them), or
    far-mass rows lighter than the balls, stop a batch of records alone with the same error
    as one record at a time, or, where the guard sees none of it, give the same outputs."""
    rng = random.Random(45)
    refused = 0
    for _ in range(30):
        graph, mechanism, table = _generated_case(rng, wrong)
        context = mechanism.stream_context(Key.from_bytes(rng.randbytes(32)))
        groups = [(v, [canonical_subject_id(f"s{v}")]) for v in rng.sample(range(len(graph)), 40)]
        try:
            want = [
                FastSampler(mechanism, profiles=table).sample_group(context, *g) for g in groups
            ]
        except RuntimeError as exc:
            message = str(exc)
        else:
            message = None
        if message is None:
            assert FastSampler(mechanism, profiles=table).sample_each(context, groups) == want
            continue
        with pytest.raises(RuntimeError) as caught:
            FastSampler(mechanism, profiles=table).sample_each(context, groups)
        assert str(caught.value) == message
        refused += 1
    assert refused > 5


def test_a_batch_of_distinct_postcodes_takes_the_compiled_path(monkeypatch):
    """Through ``perturb_many`` with a table, records alone go through ``_sample_alone`` (in
    runs, not one call a record) and the outputs are the reference's."""
    rng = random.Random(46)
    graph = planar_graph(rng, 300, 330, 1.0, 20)
    mechanism = Mechanism(graph, "1")
    key = Key.from_bytes(rng.randbytes(32))
    codes = [graph.label(v) for v in rng.sample(range(len(graph)), 200)]
    ids = [f"p{i}" for i in range(len(codes))]
    runs: list[int] = []
    real = FastSampler._sample_alone

    def spy(self, context, decider, nodes, subject_ids):
        runs.append(len(nodes))
        return real(self, context, decider, nodes, subject_ids)

    monkeypatch.setattr(FastSampler, "_sample_alone", spy)
    got = perturb_many(mechanism, key, ids, codes, workers=1, profiles=True)
    assert got == mechanism.perturb_reference(key, ids, codes)
    assert sum(runs) >= 150 and len(runs) <= 4, runs


def test_rows_the_python_path_refuses_are_refused_here_too():
    """Hand-made far-mass rows: values near -2**63, whose differences would wrap in 64 bits,
    are unusable here as they are for ``bounds.row_tail`` (the outputs stay the reference's
    or are refused alike), and cluster numbers past the rows raise the same error."""
    total = 2**62
    prior = [3 * total // 10, 2 * total // 10, 0] + [1] * 6
    prior[2] = total - sum(prior)  # the heavy postcode, 2 hops along a path of 9
    n = len(prior)
    indptr = np.concatenate([[0], np.cumsum([(i > 0) + (i < n - 1) for i in range(n)])])
    indices = np.array([j for i in range(n) for j in (i - 1, i + 1) if 0 <= j < n])
    graph = Graph([f"P{i}" for i in range(n)], np.arange(n), indptr, indices, prior)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mechanism = Mechanism(graph, "3", radius=8)
    table = engine_profiles.BallProfiles(
        engine_profiles.build_profiles(graph, loc_mass(graph), 1), graph
    )
    a, b = prior[0], prior[1]
    row = [a, a + b, a + b, -(2**63), -(2**63) + total + 1] + [-(2**63) + total + 1] * 4
    key = Key.from_bytes(bytes(range(1, 33)))
    context = mechanism.stream_context(key)
    ids = [canonical_subject_id(f"s{i}") for i in range(200)]
    calls = []

    def outcomes(cluster_of, alone_min, patch):
        """Each record drawn on its own (a run of one record alone), or the error it meets."""
        table.far = cluster_balls.ClusterBalls(np.array([row], dtype=np.int64), cluster_of, graph)
        patch.setattr(fast_module, "ALONE_MIN", alone_min)
        sampler = FastSampler(mechanism, profiles=table)
        found = []
        for subject in ids:
            try:
                found.append(sampler.sample_each(context, [(0, [subject])]))
            except (RuntimeError, IndexError) as exc:
                found.append((type(exc), str(exc)))
        return found

    real = FastSampler._sample_alone

    def spy(self, *args):
        calls.append(1)
        return real(self, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FastSampler, "_sample_alone", spy)
        for cluster_of in (
            np.zeros(n, dtype=np.int32),  # the wrapping row
            np.zeros(n, dtype=np.float64),  # clusters as floats: the Python path reads them
            np.full(n, 5, dtype=np.int32),  # no such row: IndexError, as before
        ):
            new = outcomes(cluster_of, 1, patch)
            assert len(calls) == 200 or cluster_of.dtype.kind == "f"
            calls.clear()
            assert new == outcomes(cluster_of, 10**9, patch)
            assert not calls
        assert any(isinstance(o, tuple) and o[0] is IndexError for o in new)


def test_a_disagreement_names_what_the_first_record_meets(small_clusters):
    """With the table wrong at a group of two records and the far-mass rows too light, the
    error is the one a record-by-record run meets first (the table's), not the one a record
    alone drawn earlier would meet (the rows')."""
    checked = 0
    for seed in range(40):
        rng = random.Random(seed)
        graph = planar_graph(rng, 200, 220, 1.0, 20)
        mechanism = Mechanism(graph, "0.5")
        built = engine_profiles.build_profiles(graph, loc_mass(graph), 2).astype(np.int64)
        balls, cluster_of = cluster_balls.build_cluster_balls(graph, loc_mass(graph))
        balls[:, 1:3] = balls[:, :1]  # too light within the table's depth
        built[graph.node_location[0], 1:] += 1  # and the table wrong at node 0's location
        table = engine_profiles.BallProfiles(built, graph)
        table.far = cluster_balls.ClusterBalls(balls, cluster_of, graph)
        context = mechanism.stream_context(Key.from_bytes(rng.randbytes(32)))
        groups = [(0, [canonical_subject_id("a1"), canonical_subject_id("a2")])]
        groups += [(v, [canonical_subject_id(f"b{v}")]) for v in rng.sample(range(1, 200), 20)]
        messages = []
        for alone_min in (10**9, 1):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(fast_module, "ALONE_MIN", alone_min)
                try:
                    FastSampler(mechanism, profiles=table).sample_each(context, groups)
                except RuntimeError as exc:
                    messages.append(str(exc))
                else:
                    messages.append(None)
        assert messages[0] == messages[1]
        checked += messages[0] is not None and "profiles" in messages[0]
    assert checked > 3
