"""The report as one self-contained HTML page, from the Jinja2 template shipped with the package.

Self-contained: figures are embedded as base64 PNG data URIs, the styles are inline, and there
is no script and no external URL of any kind, so the page reads the same offline and leaks
nothing to a server when opened.  Autoescaping is on; only the number formatters return markup.
Probabilities are printed by ``_numbers`` (never an untrue 0 or 100%), bounds rounded up.
"""

from __future__ import annotations

import base64
import math
from fractions import Fraction

from markupsafe import Markup, escape

from .._wording import counted
from ..mechanism.radius import round_up
from ._data import Report
from ._numbers import exact_value, number, percent, risk_percent


def number_up(value: Fraction | dict | None, digits: int = 3) -> Markup:
    """A positive bound as readable text, rounded *up* to ``digits`` significant digits in
    exact arithmetic, so that "at most" stays true of the printed figure (``None``: a bound
    past 10^307, ``_data._exp_upper``); a bound below 1 gets the digits it takes not to print
    as 1 (a teleport bound of 0.9999974 was "at most 1": a review)."""
    if value is None:
        return Markup("more than 10<sup>307</sup>")
    x = exact_value(value)
    if x <= 0:
        return Markup("0")
    if 1000 <= x < 10**6:  # a whole number, rounded up
        return Markup(f"{-(-x.numerator // x.denominator):,}")
    mantissa, exponent = round_up(x, digits)
    rounded = Fraction(mantissa) / Fraction(10) ** (digits - 1 - exponent)
    if x < 1 <= rounded and digits < 30:  # a probability below 1 never reads as certain
        return number_up(value, digits + 1)
    if exponent >= 6 or exponent < -3:
        text = f"{mantissa}"
        mantissa_text = text[0] + ("." + text[1:] if digits > 1 else "")
        return Markup(f"{escape(mantissa_text)} &times; 10<sup>{exponent}</sup>")
    if rounded >= 1000:  # 999.9 rounded up
        return Markup(f"{int(rounded):,}")
    return Markup(escape(f"{float(rounded):.{digits}g}"))


def percent_up(value: Fraction | dict | None) -> str:
    """An upper bound on a probability as a percentage rounded *up* to one decimal, so that
    "at most" stays true; a bound below 1 that would round up to 100% prints as "almost 100%"
    (``None``: the bound of a ratio past 10^307, ``_data._two_candidates_upper``)."""
    if value is None:
        return "almost 100%"
    x = exact_value(value)
    if x >= 1:
        return "100%"
    steps = math.ceil(x * 1000)  # exact: x is a Fraction
    if steps >= 1000:
        return "almost 100%"
    return f"{steps // 10}.{steps % 10}%"


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(
        loader=PackageLoader("postcode_privacy.report", "templates"),
        autoescape=select_autoescape(default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        number=number,
        number_up=number_up,
        percent=percent,
        percent_up=percent_up,
        risk_percent=risk_percent,
        counted=lambda n, noun: counted(n, noun, grouped=True),
        data_uri=data_uri,
    )
    return env


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page (no scripts, no external resources)."""
    template = _environment().get_template("report.html.j2")
    return template.render(d=report.data, figures=report.figures)
