"""Maps drawn offline from the graph itself: no tiles, no network, no shapefiles.

Background: the density of the graph's own postcode locations (a 2-D histogram, grey, log
scale), which traces Great Britain's coastline, towns and empty uplands.  Labels: postcode
district names at the centroid of each district's postcodes (the largest districts in view).
On top: the probability of each output, summed per map cell, for one true postcode; a scale
bar; and an inset of the whole country with the mapped area marked.  Every map states the share
of probability that falls outside its frame (including the teleport tail, which can land
anywhere).  Projected coordinates are OSGB36 metres, so distances on the map are true.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .._input_files import visible_text
from ..evaluate.exact import ExactMechanism, OutputDistribution
from ..evaluate.truncation import group_codes
from ..graph.graph import Graph
from ._figures import in_default_style, png
from ._numbers import percent

_CELLS = 120  # map cells across the frame
_LABELS = 8  # district labels per map at most
_NATIONAL_BINS = 260


@dataclass
class Geography:
    """What every map of one graph shares, computed once per graph (about a second nationally)."""

    xy: np.ndarray  # location coordinates, metres
    counts: np.ndarray  # postcodes per location
    national: np.ndarray  # 2-D histogram of locations (inset background)
    national_extent: tuple[float, float, float, float]
    district_names: list[str]
    district_xy: np.ndarray
    district_size: np.ndarray


_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def geography(graph: Graph) -> Geography:
    """The background, inset and labels of ``graph`` (cached for the graph's lifetime)."""
    cached = _cache.get(graph)
    if cached is not None:
        return cached
    xy = graph.require_coordinates()
    counts = np.diff(graph.members_indptr).astype(np.int64)
    lo, hi = xy.min(axis=0), xy.max(axis=0)
    side = float(max(hi - lo)) or 1.0
    span = (lo[0], lo[0] + side, lo[1], lo[1] + side)
    national, _, _ = np.histogram2d(
        xy[:, 0], xy[:, 1], bins=_NATIONAL_BINS, range=[span[:2], span[2:]]
    )
    names: list[str] = []
    centres = np.zeros((0, 2))
    sizes = np.zeros(0, dtype=np.int64)
    codes = group_codes(graph, "district")
    if codes is not None:
        n = int(codes.max()) + 1
        sizes = np.bincount(codes, minlength=n)
        node_xy = xy[graph.node_location]
        centres = np.stack(
            [
                np.bincount(codes, weights=node_xy[:, 0], minlength=n),
                np.bincount(codes, weights=node_xy[:, 1], minlength=n),
            ],
            axis=1,
        )
        centres /= sizes[:, None]
        first = np.full(n, -1, dtype=np.int64)
        first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # first node of each district
        names = [visible_text(graph.label(int(i)).split(" ")[0]) for i in first.tolist()]
    geo = Geography(xy, counts, national, span, names, centres, sizes)
    _cache[graph] = geo
    return geo


def _nice_length(width_m: float) -> float:
    """A round scale-bar length near a fifth of the frame: 1, 2 or 5 times a power of ten."""
    target = width_m / 5.0
    power = 10.0 ** np.floor(np.log10(target))
    return float(max(m * power for m in (1, 2, 5) if m * power <= target))


def _length_text(metres: float) -> str:
    return f"{metres / 1000:.3g} km" if metres >= 1000 else f"{metres:.3g} m"


def probability_in(exact: ExactMechanism, dist: OutputDistribution, where: np.ndarray) -> Fraction:
    """The exact probability that ``dist``'s output lies at a location where ``where`` (a
    boolean over every location of the graph) holds: ball locations with their own weights,
    every other location with the teleport weight (``ExactMechanism.teleport_probability``)."""
    in_ball = where[dist.locations].tolist()
    ball = sum(w for w, keep in zip(exact.location_weights(dist), in_ball) if keep)
    beyond = where.copy()
    beyond[dist.locations] = False
    rest = sum(exact.loc_mass[beyond].tolist())  # exact Python integers
    return Fraction(ball + exact.powers[exact.radius] * rest, dist.normaliser)


@in_default_style
def place_map(
    exact: ExactMechanism, dist: OutputDistribution, label: str, half_width_m: float, title: str
) -> tuple[bytes, Fraction]:
    """The map of where ``label`` can be released, framed ``half_width_m`` around it; returns the
    PNG and the exact share of probability outside the frame."""
    from matplotlib import patheffects
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from mpl_toolkits.axes_grid1.anchored_artists import AnchoredSizeBar

    geo = geography(exact.graph)
    cx, cy = geo.xy[dist.location]
    x0, x1, y0, y1 = cx - half_width_m, cx + half_width_m, cy - half_width_m, cy + half_width_m
    frame = [[x0, x1], [y0, y1]]

    inside = (
        (geo.xy[:, 0] >= x0) & (geo.xy[:, 0] <= x1) & (geo.xy[:, 1] >= y0) & (geo.xy[:, 1] <= y1)
    )
    background, _, _ = np.histogram2d(
        geo.xy[inside, 0], geo.xy[inside, 1], bins=_CELLS, range=frame, weights=geo.counts[inside]
    )
    probs = exact.location_probabilities(dist)
    bxy = geo.xy[dist.locations]
    layer, _, _ = np.histogram2d(bxy[:, 0], bxy[:, 1], bins=_CELLS, range=frame, weights=probs)
    # Exact, teleport included: a float sum of ~1 would round a small share outside to 0.
    outside = 1 - probability_in(exact, dist, inside)

    fig = Figure(figsize=(6.6, 6.0))
    ax = fig.add_subplot()
    extent = (x0, x1, y0, y1)
    ax.set_facecolor("#eef3f7")  # sea, and land without postcodes
    ax.imshow(
        np.ma.masked_equal(background.T, 0),
        origin="lower",
        extent=extent,
        cmap="Greys",
        norm=LogNorm(vmin=0.2, vmax=max(background.max(), 1.0) * 1.5),
        interpolation="nearest",
    )
    # Cells below 1/10,000 of the likeliest are left uncoloured, so the land shows through.
    floor = float(layer.max()) * 1e-4
    positive = layer > floor
    if positive.any():
        norm = LogNorm(vmin=floor, vmax=float(layer.max()))
        image = ax.imshow(
            np.ma.masked_less_equal(layer.T, floor),
            origin="lower",
            extent=extent,
            cmap="plasma_r",
            norm=norm,
            alpha=0.8,
            interpolation="nearest",
        )
        bar = fig.colorbar(image, ax=ax, shrink=0.8, pad=0.02)
        bar.set_label(
            f"probability of release per {_length_text(2 * half_width_m / _CELLS)} square"
        )
    ax.plot(
        [cx],
        [cy],
        marker="*",
        markersize=16,
        color="#00a651",
        markeredgecolor="black",
        linestyle="none",
        label=f"true postcode {label}",
        zorder=5,
    )

    # District names at district centroids: the biggest districts in the frame.
    d = geo.district_xy
    if len(d):
        # (none right on the star: the examples sit at their district's centroid)
        clear = np.hypot(d[:, 0] - cx, d[:, 1] - cy) > 0.12 * half_width_m
        shown = np.flatnonzero(
            (d[:, 0] > x0) & (d[:, 0] < x1) & (d[:, 1] > y0) & (d[:, 1] < y1) & clear
        )
        shown = shown[np.argsort(-geo.district_size[shown], kind="stable")][:_LABELS]
        for i in shown.tolist():
            ax.text(
                d[i, 0],
                d[i, 1],
                geo.district_names[i],
                fontsize=9,
                ha="center",
                va="center",
                color="#102a43",
                weight="bold",
                path_effects=[patheffects.withStroke(linewidth=3, foreground="white")],
            )

    ax.add_artist(
        AnchoredSizeBar(
            ax.transData,
            _nice_length(2 * half_width_m),
            _length_text(_nice_length(2 * half_width_m)),
            "lower left",
            pad=0.5,
            frameon=True,
            size_vertical=half_width_m / 150,
        )
    )
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper right", fontsize=8, framealpha=0.9)

    # Inset: the whole country, with this frame marked.
    inset = ax.inset_axes((0.0, 0.7, 0.2, 0.3))
    inset.imshow(
        np.ma.masked_equal(geo.national.T, 0),
        origin="lower",
        extent=geo.national_extent,
        cmap="Greys",
        norm=LogNorm(vmin=0.5),
        alpha=0.9,
        interpolation="nearest",
    )
    inset.set_facecolor("#eef3f7")
    side = max(2 * half_width_m, (geo.national_extent[1] - geo.national_extent[0]) / 60)
    inset.add_patch(
        Rectangle(
            (cx - side / 2, cy - side / 2), side, side, fill=False, edgecolor="red", linewidth=1.5
        )
    )
    inset.set_xticks([])
    inset.set_yticks([])
    inset.set_aspect("equal")
    ax.text(
        0.99,
        0.01,
        f"outside this frame: {percent(outside, 2)}",
        transform=ax.transAxes,
        ha="right",
        va="bottom",
        fontsize=8,
        bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none"},
    )
    return png(fig), outside
