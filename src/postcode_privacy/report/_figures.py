"""Plain figures (displacement histograms) and the PNG encoding every figure shares."""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from ..evaluate.utility import mixture_quantile_m
from ._numbers import percent

_Drawing = TypeVar("_Drawing", bound=Callable)


def in_default_style(draw: _Drawing) -> _Drawing:
    """Draw with matplotlib's own defaults, whatever a ``matplotlibrc`` in the current
    directory, ``$MPLCONFIGDIR`` or the user's configuration says: a report is the same bytes
    for the same inputs and matplotlib version (which the report records)."""

    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        from matplotlib import style

        with style.context("default"):
            return draw(*args, **kwargs)

    return drawn  # type: ignore[return-value]


def png(fig) -> bytes:
    """The matplotlib figure as PNG bytes (Agg, no display, no metadata timestamps)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=96, bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


@in_default_style
def histogram_figure(hist_m: np.ndarray, what: str) -> bytes:
    """Bars of displacement probability per distance band (up to the 99th percentile)."""
    from matplotlib.figure import Figure

    total = hist_m.sum()
    top_m = max(mixture_quantile_m(hist_m, 0.99) + 1, 10)
    width = max(1, int(math.ceil(top_m / 40)))
    edges = np.arange(0, top_m + width, width)
    cumulative = np.concatenate(([0.0], np.cumsum(hist_m)))
    upper = np.minimum(edges, hist_m.size)
    mass = np.diff(cumulative[upper]) / total
    beyond = 1.0 - cumulative[upper[-1]] / total
    fig = Figure(figsize=(6.4, 3.4))
    ax = fig.add_subplot()
    ax.bar(edges[:-1] / 1000.0, mass, width=width / 1000.0, align="edge", color="#3b6ea5")
    ax.set_xlabel("displacement (km)")
    ax.set_ylabel("probability")
    ax.set_title(f"Displacement distribution: {what}", fontsize=10)
    ax.text(
        0.98,
        0.95,
        f"beyond {edges[-1] / 1000:.3g} km: {percent(beyond, 2)}",
        transform=ax.transAxes,
        ha="right",
        va="top",
        fontsize=8,
    )
    return png(fig)
