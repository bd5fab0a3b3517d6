"""What a release at a given epsilon means, for a data protection officer: one offline HTML page.

* ``_data``: gathers the numbers (exact, from ``evaluate``) and calls the figure modules;
* ``_examples``: which city, town and remote postcodes are shown;
* ``_maps``: offline maps drawn from the graph's own postcode locations;
* ``_figures``: displacement histograms and PNG encoding;
* ``_manifest``: the publishable fields of a release's manifest (``--manifest``), read
  strictly, its text made visible (no control or direction characters);
* ``_numbers``: probabilities as text, never rounded to an untrue 0 or 100%;
* ``_render``: the Jinja2 template ``templates/report.html.j2`` into one self-contained page;
* ``_write``: atomic writing of the HTML or JSON form.
"""

from ._data import FORMAT, FORMAT_VERSION, Report, build_report, place_summary
from ._examples import example_postcodes, local_spacing_m
from ._manifest import ReleaseFacts, read_manifest
from ._render import render_html
from ._write import write_report

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "ReleaseFacts",
    "Report",
    "build_report",
    "example_postcodes",
    "local_spacing_m",
    "place_summary",
    "read_manifest",
    "render_html",
    "write_report",
]
