"""``evaluate``: utility, a Bayesian adversary, key compromise and truncation, on one sample.

Reproducibility.  The evaluation's own randomness (which postcodes are sampled, and the keys
standing in for the custodian's) comes from a seeded numpy Generator, never from the mechanism's
keyed stream and never from the operating system: the same seed, graph and parameters give the
same report.  The keys are therefore *not* secret and must never be used for a release.

Scenarios for the adversary, per sampled subject s with true postcode x:

* one release: y = f_k0(s, x);
* K independent draws: f_k1(s, x), ..., f_kK(s, x) under K different keys, as if a custodian
  re-keyed (or re-ran an unkeyed mechanism) for every release;
* K keyed releases: f_k0(s, x) computed K times.  They must be identical, and the adversary's
  view must then equal the one-release view exactly; both are checked and a failure raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .._exact_numbers import (
    float_above,
    float_below,
    honest_float,
    percent_range,
    risk_percent,
)
from .._limits import DEFAULT_HOPS, EVALUATE_SAMPLE, MAX_HOPS, MAX_RELEASES, MAX_SEED
from ..errors import InvalidParameterError, PostcodePrivacyError, option_name
from ..graph.graph import Graph
from ..mechanism.keys import Key
from ..mechanism.mechanism import Mechanism
from ..mechanism.radius import NoDefaultRadiusError
from .adversary import (
    AdversaryOutcome,
    ExpectedIdentification,
    distinct_draws,
    expected_identification,
    posterior_outcome,
    summarise,
)
from .calibrate import calibrate
from .compromise import key_compromise, perturb_nodes
from .exact import ExactMechanism
from .truncation import group_codes, truncation_baseline
from .utility import measure_utility

FORMAT = "postcode-privacy-evaluation"
# 2: risks also as text rounded up from their exact fractions: unchanged_rate_text (one release,
#    expected over the draw), median_/max_self_probability_text, truncation's
#    identification_rate_text
FORMAT_VERSION = 2


def check_count(name: str, value, maximum: int, minimum: int = 1) -> int:
    """``value`` as an int if it is a whole number from ``minimum`` to ``maximum``; else
    InvalidParameterError naming the option as the user wrote it (``--releases``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidParameterError(f"{option_name(name)} must be a whole number")
    if not minimum <= value <= maximum:
        raise InvalidParameterError(f"{option_name(name)} must be from {minimum} to {maximum:,}")
    return int(value)


def check_seed(seed) -> int:
    """The seed of a study, from 0 to ``MAX_SEED`` as on the command line."""
    return check_count("seed", seed, MAX_SEED, minimum=0)


def select_sample(graph: Graph, size: int, seed: int) -> np.ndarray:
    """``size`` distinct nodes drawn by prior (a person at random), sorted; seeded."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        raise InvalidParameterError("the sample size must be a whole number of at least 1")
    rng = np.random.default_rng([check_seed(seed), 0])
    n = len(graph)
    size = min(int(size), n)
    p = graph.prior.astype(np.float64) / float(graph.total_prior)
    return np.sort(rng.choice(n, size=size, replace=False, p=p)).astype(np.int64)


def evaluation_keys(seed: int, count: int) -> list[Key]:
    """``count`` keys derived from the seed (reproducible; NOT secret, never for releases)."""
    rng = np.random.default_rng([check_seed(seed), 1])
    return [Key.from_bytes(rng.bytes(32)) for _ in range(count)]


@dataclass
class AreaCodes:
    codes: np.ndarray | None  # int code per node, -1 unknown
    mass: np.ndarray | None  # total prior per code
    note: str | None


def area_codes(graph: Graph, laua=None) -> AreaCodes:
    """Local authority codes for every node: ``laua`` if given (one value per node, None where
    unknown), else the bundled ONS directory; a note instead when neither is available."""
    if laua is None:
        try:
            from ..sources.directory import bundled_laua

            laua = bundled_laua(graph.postcodes)
        except (ImportError, PostcodePrivacyError) as exc:
            return AreaCodes(
                None,
                None,
                f"local authority codes unavailable ({type(exc).__name__}); "
                "same-local-authority share skipped",
            )
    values = np.asarray(laua, dtype=object)
    if values.shape != (len(graph),):
        raise InvalidParameterError("laua must give one value per graph node")
    known = np.array([v is not None and v == v and str(v) != "" for v in values], dtype=bool)
    if not known.any():
        return AreaCodes(
            None, None, "no node has a local authority code; same-local-authority share skipped"
        )
    codes = np.full(len(graph), -1, dtype=np.int64)
    _, inverse = np.unique(values[known].astype(str), return_inverse=True)
    codes[known] = inverse
    mass = np.zeros(int(inverse.max()) + 1, dtype=np.int64)
    np.add.at(mass, codes[known], graph.prior[known])
    note = None
    if not known.all():
        note = f"{int((~known).sum())} postcodes have no local authority code (counted as a change)"
    return AreaCodes(codes, mass, note)


def evaluate_release(
    graph: Graph,
    epsilon,
    *,
    radius: int | None = None,
    sample: int = EVALUATE_SAMPLE,
    releases: int = 20,
    seed: int = 0,
    adversary_hops: int = DEFAULT_HOPS,
    compromise_hops: int = DEFAULT_HOPS,
    compromise_sample: int | None = None,
    laua=None,
    match_truncation: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict:
    """Measure a release at ``epsilon`` on a seeded sample; returns a JSON-ready report.

    ``laua``: local authority per node (defaults to the bundled directory).  The report carries
    a format marker and version, the graph's sha256 and every parameter.  ``progress``, if
    given, is called as ``progress(stage, done, total)`` while it runs (it must not print to
    stdout).
    """

    def report(stage: str, done: int, total: int) -> None:
        if progress is not None:
            progress(stage, done, total)

    releases = check_count("releases", releases, MAX_RELEASES)
    adversary_hops = check_count("adversary_hops", adversary_hops, MAX_HOPS)
    compromise_hops = check_count("compromise_hops", compromise_hops, MAX_HOPS)
    seed = check_seed(seed)  # (before any work, as the command line refuses it)
    mechanism = Mechanism(graph, epsilon, radius)
    exact = ExactMechanism(mechanism)
    nodes = select_sample(graph, sample, seed)
    subjects = [f"evaluation-subject-{i}" for i in range(len(nodes))]
    notes: list[str] = []

    report("utility", 0, 1)
    areas = area_codes(graph, laua)
    if areas.note:
        notes.append(areas.note)
    utility = measure_utility(exact, nodes, areas.codes, areas.mass)
    report("utility", 1, 1)

    report("adversary", 0, len(nodes))
    scenarios = adversary_scenarios(
        mechanism,
        exact,
        nodes,
        releases,
        seed,
        adversary_hops,
        progress=lambda done, total: report("adversary", done, total),
    )
    key0, first = scenarios.key0, scenarios.first_release
    report("key compromise", 0, 1)
    n_comp = (
        len(nodes) if compromise_sample is None else max(1, min(int(compromise_sample), len(nodes)))
    )
    compromise = key_compromise(
        exact, key0, subjects[:n_comp], nodes[:n_comp], first[:n_comp], compromise_hops
    )
    report("key compromise", 1, 1)

    truncation = {}
    for level in ("sector", "district"):
        report(f"{level} truncation", 0, 2)
        codes = group_codes(graph, level)
        summary = (
            truncation_baseline(graph, nodes, level, areas.codes, codes)
            if codes is not None
            else None
        )
        if summary is None:
            notes.append(
                f"{level} truncation skipped: the graph's labels are not all postcodes "
                "or it has no coordinates"
            )
            continue
        entry = summary.to_json()
        if match_truncation:
            report(f"{level} truncation", 1, 2)  # next: the epsilon with its utility
            try:
                matched = calibrate(
                    graph, {"median-displacement-km": summary.median_displacement_km}, nodes
                )
            except NoDefaultRadiusError:  # (the graph's prior is very uneven)
                entry["matching_epsilon"] = None
                entry["matching_note"] = (
                    "not searched: an epsilon the search must measure has no default radius "
                    "on this graph (its prior is very uneven)"
                )
            else:
                entry["matching_epsilon"] = matched.to_json()["epsilon"]
                entry["matching_note"] = (
                    "smallest epsilon (two significant figures) whose median "
                    "displacement is at most the truncation's; "
                    + ("; ".join(matched.warnings) if matched.warnings else "met")
                )
        truncation[level] = entry
        report(f"{level} truncation", 2, 2)

    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        **identify_mechanism(mechanism),
        "teleport_bound": float_above(mechanism.teleport_bound),  # a bound: never below it
        "teleport_bound_exact": (
            f"{mechanism.teleport_bound.numerator}/{mechanism.teleport_bound.denominator}"
        ),
        "seed": int(seed),
        "sample_size": len(nodes),
        "releases": int(releases),
        "utility": utility.to_json(),
        "adversary": {
            "candidate_set": (
                f"every postcode within {adversary_hops} hops of an observed output, "
                "plus the true postcode if further out; restricting to a set that "
                "contains the truth can only help the adversary"
            ),
            "hops": adversary_hops,
            "one_release": summarise(scenarios.one).to_json(),
            "one_release_expected": scenarios.expected_rate(),
            "independent_draws": summarise(scenarios.independent).to_json(),
            "keyed_releases": summarise(scenarios.keyed).to_json(),
            "keyed_equals_one_release": True,
        },
        "key_compromise": compromise.to_json(),
        "truncation": truncation,
        "notes": notes,
    }


@dataclass
class AdversaryScenarios:
    """The adversary's view of every sampled subject in the three scenarios of the module doc."""

    key0: Key
    first_release: list[int]  # the one release's output node per subject
    one: list[AdversaryOutcome]
    independent: list[AdversaryOutcome]
    keyed: list[AdversaryOutcome]
    # per subject, the chance over the draw itself that one release names it (not one draw)
    one_expected: list[ExpectedIdentification]

    def expected_rate(self) -> dict:
        """The one-release identification rate averaged over the sampled subjects, each
        subject's chance taken exactly over its draw (``expected_identification``): the
        figure to quote, where ``one`` holds one simulated draw per subject."""
        n = len(self.one_expected)
        low = sum((e.low for e in self.one_expected), Fraction(0)) / n
        high = sum((e.high for e in self.one_expected), Fraction(0)) / n
        unchanged = sum((e.self_probability for e in self.one_expected), Fraction(0)) / n

        return {  # floats (the fractions' digits grow with the sample: too many to write
            # out); the range's rounded outward, to the nearest floats holding the exact one
            # (1.0 or 0.0 included), and its text made from the exact bounds
            "identification_rate": float_below(low),
            "identification_rate_high": float_above(high),
            "identification_rate_text": percent_range(low, high),
            "unchanged_rate": honest_float(unchanged),
            "unchanged_rate_text": risk_percent(unchanged),  # rounded up, from the exact
        }


def adversary_scenarios(
    mechanism: Mechanism,
    exact: ExactMechanism,
    nodes: np.ndarray,
    releases: int,
    seed: int,
    hops: int,
    progress: Callable[[int, int], None] | None = None,
) -> AdversaryScenarios:
    """One release, K = ``releases`` independent draws and K keyed releases of each sampled node
    under stand-in keys derived from ``seed``; raises if the keyed view differs from one
    release.  ``progress(done, total)`` is called after each subject."""
    subjects = [f"evaluation-subject-{i}" for i in range(len(nodes))]
    keys = evaluation_keys(seed, releases + 1)
    key0, fresh = keys[0], keys[1:]

    def release(key: Key) -> list[int]:
        return perturb_nodes(mechanism, key, subjects, nodes).tolist()

    first = release(key0)
    keyed_runs = [first] + [release(key0) for _ in range(releases - 1)]
    independent_runs = [release(k) for k in fresh]
    one, independent, keyed, one_expected = [], [], [], []
    for i, x in enumerate(nodes.tolist()):
        one_expected.append(expected_identification(exact, x, hops))
        outcome_one = posterior_outcome(exact, x, [first[i]], hops)
        draws = distinct_draws((k.fingerprint, run[i]) for k, run in zip(fresh, independent_runs))
        outcome_ind = posterior_outcome(exact, x, draws, hops)
        keyed_draws = distinct_draws((key0.fingerprint, run[i]) for run in keyed_runs)
        outcome_keyed = posterior_outcome(exact, x, keyed_draws, hops)
        if outcome_keyed != outcome_one:
            raise PostcodePrivacyError(
                "keyed releases changed the adversary's view: keyed determinism is broken"
            )
        one.append(outcome_one)
        independent.append(outcome_ind)
        keyed.append(outcome_keyed)
        if progress is not None:
            progress(i + 1, len(nodes))
    return AdversaryScenarios(key0, first, one, independent, keyed, one_expected)


def identify_mechanism(mechanism) -> dict:
    """What a machine-readable report must carry to say which release it describes."""
    return mechanism.identity()
