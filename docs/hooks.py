"""MkDocs hook: let the mirrored changelog keep links written from the repository root.

``docs/changelog.md`` is a symbolic link to ``CHANGELOG.md``, which sits at the top of the
repository and so naturally links to pages as ``docs/methods.md``.  Inside the site that page
lives in ``docs/`` itself, so those targets are rewritten to ``methods.md`` before MkDocs
resolves and validates links.  No other page is touched.
"""

from __future__ import annotations

import re

CHANGELOG = "changelog.md"

# An inline Markdown link or image target that starts with "docs/" (optionally "./docs/").
_REPO_ROOT_LINK = re.compile(r"(\]\()(?:\./)?docs/")
# A reference-style definition: "[label]: docs/page.md".
_REPO_ROOT_REFERENCE = re.compile(r"^(\s{0,3}\[[^\]]+\]:\s*)(?:\./)?docs/", re.MULTILINE)


def rewrite_changelog_links(markdown: str) -> str:
    """``docs/x.md`` link targets become ``x.md``; everything else is unchanged."""
    markdown = _REPO_ROOT_LINK.sub(r"\1", markdown)
    return _REPO_ROOT_REFERENCE.sub(r"\1", markdown)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == CHANGELOG:
        return rewrite_changelog_links(markdown)
    return markdown


# pymdownx.arithmatex (generic mode) leaves each formula as escaped LaTeX inside a span (inline,
# delimited by \( \)) or a div (display, delimited by \[ \]).
_INLINE_MATH = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.DOTALL)
_DISPLAY_MATH = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.DOTALL)


def latex_to_mathml(html: str) -> str:
    """Replace arithmatex's LaTeX placeholders by MathML, typeset by the browser itself.

    Rendering at build time keeps the site self-contained: no maths script, no CDN, and the
    formulas read the same offline.
    """
    from html import unescape

    from latex2mathml.converter import convert

    def inline(match: re.Match) -> str:
        return convert(unescape(match.group(1)).strip(), display="inline")

    def display(match: re.Match) -> str:
        return (
            f'<div class="math">{convert(unescape(match.group(1)).strip(), display="block")}</div>'
        )

    return _INLINE_MATH.sub(inline, _DISPLAY_MATH.sub(display, html))


# The docstrings cross-reference in Sphinx's roles (:class:`Graph`, :func:`~pkg.mod.name`), which
# Markdown leaves as a literal ":class:" before the code span on the generated API page.
_SPHINX_ROLE = re.compile(r":(?:class|meth|func|attr|data|exc|mod|obj):<code>(~?)([^<]*)</code>")


def strip_sphinx_roles(html: str) -> str:
    """Drop the role and, as Sphinx does, shorten ``~a.b.name`` to its last part."""

    def code(match: re.Match) -> str:
        target = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
        return f"<code>{target}</code>"

    return _SPHINX_ROLE.sub(code, html)


def on_page_content(html, page, config, files):
    return latex_to_mathml(strip_sphinx_roles(html))
