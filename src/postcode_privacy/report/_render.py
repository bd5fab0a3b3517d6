"""The report as one self-contained HTML page, from the Jinja2 template shipped with the package.

Self-contained: figures are embedded as base64 PNG data URIs, the styles are inline, and there
is no script and no external URL of any kind, so the page reads the same offline and leaks
nothing to a server when opened.  Autoescaping is on; only the number formatter returns markup.
"""

from __future__ import annotations

import base64

from markupsafe import Markup, escape

from ._data import Report


def number(x: float | None, digits: int = 3) -> Markup:
    """A probability or ratio as readable text: 0.0123, 1.23 x 10^-7, 12,345."""
    if x is None:
        return Markup("more than 10<sup>308</sup>")
    if x == 0:
        return Markup("0")
    if abs(x) >= 1e6 or abs(x) < 1e-3:
        mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
        return Markup(f"{escape(mantissa)} &times; 10<sup>{int(exponent)}</sup>")
    if abs(x) >= 1000:
        return Markup(f"{x:,.0f}")
    return Markup(f"{x:.{digits}g}")


def percent(x: float | None) -> str:
    if x is None:
        return "n/a"
    if 0 < x < 0.001:
        return "under 0.1%"
    return f"{x:.1%}"


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
    env.filters.update(number=number, percent=percent, data_uri=data_uri)
    return env


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page (no scripts, no external resources)."""
    template = _environment().get_template("report.html.j2")
    return template.render(d=report.data, figures=report.figures)
