"""Which postcodes the report shows as examples.

Where the graph holds them, fixed well-known districts: LS1 (Leeds city centre), LA9 (Kendal, a
market town) and IV27 (north-west Sutherland, remote), taking in each the postcode nearest the
district's prior-weighted centroid.  Otherwise by density: the postcodes whose mean distance to
their graph neighbours sits at the 5th, 50th and 99.5th percentile over all postcodes.
"""

from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..graph.graph import Graph

WELL_KNOWN = (
    ("city", "LS1", "Leeds city centre"),
    ("town", "LA9", "Kendal, a market town"),
    ("remote", "IV27", "north-west Sutherland"),
)
DENSITY_PERCENTILES = (("city", 5.0), ("town", 50.0), ("remote", 99.5))


def _district_node(graph: Graph, district: str) -> int | None:
    prefix = district + " "
    members = [i for i, label in enumerate(graph.postcodes) if label.startswith(prefix)]
    if not members or graph.location_coordinates is None:
        return None
    members_arr = np.array(members, dtype=np.int64)
    xy = graph.location_coordinates[graph.node_location[members_arr]]
    w = graph.prior[members_arr].astype(np.float64)
    centre = (xy * w[:, None]).sum(axis=0) / w.sum()
    return int(members_arr[int(np.argmin(np.hypot(*(xy - centre).T)))])


def local_spacing_m(graph: Graph) -> np.ndarray:
    """Mean distance in metres from each location to its graph neighbours (NaN if isolated)."""
    xy = graph.require_coordinates()
    ip, ix = graph.loc_indptr, graph.loc_indices
    counts = np.diff(ip)
    rows = np.repeat(np.arange(graph.n_locations), counts)
    lengths = np.hypot(*(xy[rows] - xy[ix]).T)
    total = np.zeros(graph.n_locations)
    np.add.at(total, rows, lengths)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / counts


def example_postcodes(graph: Graph) -> list[dict]:
    """City, town and remote example nodes, with how each was chosen (see module docstring)."""
    if graph.location_coordinates is None:
        raise GraphError("this graph carries no coordinates, so displacements cannot be shown")
    chosen = [
        (kind, _district_node(graph, district), f"district {district} ({place})")
        for kind, district, place in WELL_KNOWN
    ]
    if all(node is not None for _, node, _ in chosen):
        return [{"kind": k, "node": n, "how": h} for k, n, h in chosen]
    spacing = local_spacing_m(graph)[graph.node_location]
    spacing = np.where(np.isnan(spacing), np.inf, spacing)
    order = np.argsort(spacing, kind="stable")
    out = []
    for kind, pct in DENSITY_PERCENTILES:
        k = min(len(order) - 1, int(round(pct / 100.0 * (len(order) - 1))))
        out.append(
            {
                "kind": kind,
                "node": int(order[k]),
                "how": f"density: {pct:g}th percentile of distance to graph neighbours",
            }
        )
    return out
