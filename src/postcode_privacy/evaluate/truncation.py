"""What custodians do today: publish the postcode sector ("LS1 1") or district ("LS1") instead.

Measured on the same terms as the mechanism:

* displacement: from the true postcode's centroid to the prior-weighted centroid of its sector
  or district (the point an analyst would put a truncated record at);
* self-probability: the chance that a postcode drawn from the released group by prior is the
  true one, pi(x) / pi(group);
* same local authority: the chance that such a draw lies in the truth's local authority;
* the Bayesian adversary holding the prior: the posterior over the group is pi restricted to it,
  so the truth's posterior is pi(x) / pi(group); with ties broken at random, as in
  ``adversary.py``, its rank is g + (t + 1) / 2 (g members with a larger prior, t with an equal
  one, itself included) and identification scores 1/t when g = 0.  Truncation
  is deterministic, so any number of releases tells the adversary exactly what one does.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._exact_numbers import risk_percent
from ..graph.graph import Graph
from ..postcodes import district, sector
from .utility import sample_quantile

LEVELS = {"sector": sector, "district": district}


@dataclass
class TruncationSummary:
    level: str
    sample_size: int
    median_displacement_km: float
    p95_displacement_km: float
    median_self_probability: float
    max_self_probability: float
    same_area_share: float | None
    identification_rate: float
    median_rank: float
    median_posterior: float
    median_group_size: float
    identification_rate_text: str  # from the exact fraction, rounded up (``risk_percent``)

    def to_json(self) -> dict:
        out = dict(self.__dict__)
        out["same_local_authority_share"] = out.pop("same_area_share")
        return out


# A postcode in the library's normal form (postcodes.try_normalise): outward, one space, inward.
_NORMAL_FORM = r"(?:[A-Z]{1,2}[0-9][A-Z0-9]? [0-9][ABD-HJLNP-UW-Z]{2}|GIR 0AA)"


def group_codes(graph: Graph, level: str) -> np.ndarray | None:
    """Integer group code per node at ``level`` ("sector" or "district"), or None when some node
    label is not a postcode in normal form (test graphs with other labels)."""
    if level not in LEVELS:
        raise ValueError(f"unknown truncation level {level!r}")
    # pyarrow's compiled string kernels: pandas' per-string Python calls took ~6 s per level on
    # the national graph.  Codes number groups in order of first appearance (as pd.factorize).
    labels = pa.array(graph.postcodes, type=pa.string())
    if not pc.all(pc.match_substring_regex(labels, f"^{_NORMAL_FORM}$")).as_py():
        return None
    if level == "sector":  # "LS1 1AB" -> "LS1 1": drop the inward code's two letters
        keys = pc.utf8_slice_codeunits(labels, 0, -2)
    else:  # "LS1 1AB" -> "LS1": the outward code, before the one space
        keys = pc.utf8_slice_codeunits(labels, 0, -4)
    return pc.dictionary_encode(keys).indices.to_numpy(zero_copy_only=False).astype(np.int64)


def truncation_baseline(
    graph: Graph, nodes, level: str, area: np.ndarray | None = None, codes: np.ndarray | None = None
) -> TruncationSummary | None:
    """Utility and adversary figures for releasing the ``level`` of each sampled node."""
    if level not in LEVELS:
        raise ValueError(f"unknown truncation level {level!r}")
    if graph.location_coordinates is None:
        return None
    if codes is None:
        codes = group_codes(graph, level)
        if codes is None:
            return None
    nodes = [int(v) for v in nodes]
    prior = graph.prior
    n_groups = int(codes.max()) + 1
    mass = np.zeros(n_groups, dtype=np.int64)
    np.add.at(mass, codes, prior)
    xy = graph.location_coordinates[graph.node_location]
    weighted = np.zeros((n_groups, 2))
    np.add.at(weighted, codes, xy * prior[:, None].astype(np.float64))
    centroid = weighted / mass[:, None].astype(np.float64)
    order = np.argsort(codes, kind="stable")
    starts = np.searchsorted(codes[order], np.arange(n_groups + 1))

    displacement, selfs, same, ident, ranks, sizes = [], [], [], [], [], []
    for x in nodes:
        g = int(codes[x])
        members = order[starts[g] : starts[g + 1]]
        pi_x = int(prior[x])
        displacement.append(float(np.hypot(*(xy[x] - centroid[g]))))
        share = Fraction(pi_x, int(mass[g]))
        selfs.append(share)
        member_prior = prior[members]
        greater = int((member_prior > pi_x).sum())
        tied = int((member_prior == pi_x).sum())  # includes x
        ranks.append(greater + (tied + 1) / 2)
        ident.append(Fraction(1, tied) if greater == 0 else Fraction(0))
        sizes.append(len(members))
        if area is not None and area[x] >= 0:
            in_area = member_prior[area[members] == area[x]]
            same.append(Fraction(int(in_area.sum()), int(mass[g])))
    identified = sum(ident, Fraction(0)) / len(nodes)
    return TruncationSummary(
        level=level,
        sample_size=len(nodes),
        median_displacement_km=sample_quantile(displacement, 0.5) / 1000.0,
        p95_displacement_km=sample_quantile(displacement, 0.95) / 1000.0,
        median_self_probability=float(np.median([float(s) for s in selfs])),
        max_self_probability=float(max(selfs)),
        same_area_share=float(sum(same) / len(same)) if same else None,
        identification_rate=float(identified),
        median_rank=float(np.median(ranks)),
        median_posterior=float(np.median([float(s) for s in selfs])),
        median_group_size=float(np.median(sizes)),
        identification_rate_text=risk_percent(identified),
    )
