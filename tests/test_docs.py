"""The documentation site: it builds strictly, its CLI reference is current, its links resolve.

Also checks the contract between code and docs: every docs page the library or its tests name
exists, and every section they cite by name, as (docs/methods.md, "Section"), is a heading there.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SRC = ROOT / "src" / "postcode_privacy"

FENCE = re.compile(r"^(```|~~~)")
INLINE_CODE = re.compile(r"(`+).+?\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose_lines(text: str, *, blank_code_spans: bool = True):
    """(line number, line) outside fenced code blocks, inline code spans blanked by default."""
    in_fence = None
    for number, line in enumerate(text.splitlines(), 1):
        marker = FENCE.match(line.lstrip())
        if marker:
            if in_fence is None:
                in_fence = marker.group(1)
            elif marker.group(1) == in_fence:
                in_fence = None
            continue
        if in_fence is None:
            yield number, INLINE_CODE.sub("", line) if blank_code_spans else line


def _anchors(path: Path) -> set[str]:
    """The ids the toc extension gives the headings of a page (duplicates get _1, _2, ...)."""
    seen: dict[str, int] = {}
    ids = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8"), blank_code_spans=False):
        match = HEADING.match(line)
        if not match:
            continue
        text = re.sub(r"[`*_]", "", match.group(2))
        base = slugify(text, "-")
        if base in seen:
            seen[base] += 1
            ids.add(f"{base}_{seen[base]}")
        else:
            seen[base] = 0
            ids.add(base)
    return ids


def _headings(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    found = set()
    for _, line in _prose_lines(text, blank_code_spans=False):
        match = HEADING.match(line)
        if match:
            found.add(match.group(2).strip())
    return found


def _links(path: Path):
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for match in INLINE_LINK.finditer(line):
            yield number, match.group(1)
        ref = REFERENCE_DEF.match(line)
        if ref:
            yield number, ref.group(1)


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built once for this module with ``mkdocs build --strict``."""
    site = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(site),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return site


@pytest.mark.slow  # builds the whole site with mkdocs
def test_mkdocs_build_strict(site):
    for page in (
        "index",
        "methods",
        "threat-model",
        "how-it-works",
        "getting-started",
        "cli",
        "changelog",
        "api",
    ):
        assert (site / f"{page}.html").is_file(), page
    # Self-contained: no page loads a script, style sheet or font from another host, and the
    # formulas arrive as MathML made at build time, not as LaTeX for a script to typeset.
    external = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=[\"']?(?:https?:)?//", re.I)
    for html_file in sorted(site.glob("*.html")):
        text = html_file.read_text(encoding="utf-8")
        assert not external.search(text), f"{html_file.name} loads something from the network"
        assert 'class="arithmatex"' not in text, f"{html_file.name} has untypeset maths"
    methods = (site / "methods.html").read_text(encoding="utf-8")
    assert methods.count("<math") >= 20
    for css in sorted(site.rglob("*.css")):
        assert not re.search(r"@import\s+url\(\s*[\"']?(?:https?:)?//", css.read_text("utf-8")), css
    # The changelog page is the repository's CHANGELOG.md, not a copy that can fall behind.
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    first_heading = next(line for line in changelog.splitlines() if line.startswith("## "))
    title = first_heading.lstrip("# ").strip()
    html = (site / "changelog.html").read_text(encoding="utf-8")
    assert title.split()[0] in html


# The public surface (issue 12): the package's __all__ and the __all__ of each documented module.
API_PAGE = DOCS / "api.md"
DOCUMENTED_MODULES = ("spark", "ledger")  # read statically: PySpark is optional
API_DIRECTIVE = re.compile(r"^::: *(\S+) *$", re.MULTILINE)


def _static_all(module_file: Path) -> list[str]:
    """A module's ``__all__`` read from its source, so PySpark need not be importable."""
    import ast

    for node in ast.parse(module_file.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{module_file} has no __all__")


def _api_identifiers() -> list[str]:
    return API_DIRECTIVE.findall(API_PAGE.read_text(encoding="utf-8"))


def test_api_page_documents_exactly_the_public_surface():
    import importlib

    import postcode_privacy

    identifiers = _api_identifiers()
    assert len(identifiers) == len(set(identifiers)), "a name is documented twice"
    by_module: dict[str, set[str]] = {name: set() for name in ("", *DOCUMENTED_MODULES)}
    for identifier in identifiers:
        module_path, _, name = identifier.rpartition(".")
        sub = module_path.removeprefix("postcode_privacy").lstrip(".")
        if sub in DOCUMENTED_MODULES:
            by_module[sub].add(name)
            continue
        # Any other path is where a package-level name is defined; it must be that very object.
        assert name in postcode_privacy.__all__, f"{identifier} is not in postcode_privacy.__all__"
        defined = getattr(importlib.import_module(module_path), name)
        assert defined is getattr(postcode_privacy, name), identifier
        by_module[""].add(name)
    assert by_module[""] == set(postcode_privacy.__all__)
    for sub in DOCUMENTED_MODULES:
        package = SRC / sub / "__init__.py"
        source = package if package.exists() else SRC / f"{sub}.py"
        assert by_module[sub] == set(_static_all(source)), f"postcode_privacy.{sub}"


@pytest.mark.slow  # builds the whole site with mkdocs
def test_api_page_renders_no_private_name(site):
    html = (site / "api.html").read_text(encoding="utf-8")
    ids = re.findall(r'\bid="(postcode_privacy\.[^"]+)"', html)
    identifiers = _api_identifiers()
    missing = set(identifiers) - set(ids)
    assert not missing, f"not rendered: {sorted(missing)}"
    # Private = a leading underscore; a dunder is private too unless __all__ lists it.
    exported = {identifier.rpartition(".")[2] for identifier in identifiers}
    private = [
        i
        for i in ids
        if any(part.startswith("_") and part not in exported for part in i.split("."))
    ]
    assert not private, f"private names on the API page: {private}"
    assert len(ids) > len(identifiers), "no members rendered: is mkdocstrings configured?"
    assert not re.search(r":(?:class|meth|func|data|attr|exc):<code>", html)


CONTRIBUTING = ROOT / "CONTRIBUTING.md"


def _layout_listing() -> list[str]:
    """Paths in CONTRIBUTING.md's "Layout" block, e.g. ``src/postcode_privacy/graph/build.py``.

    Each line is a name and a description, indented two spaces per level below its folder.
    """
    text = CONTRIBUTING.read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1]
    block = section.split("```text\n", 1)[1].split("\n```", 1)[0]
    parents: list[str] = []
    paths = []
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        assert indent % 2 == 0, f"odd indentation in the layout: {line!r}"
        depth = indent // 2
        name = line.split()[0]
        assert depth <= len(parents), f"layout line without its folder: {line!r}"
        parents = parents[:depth]
        paths.append("".join(parents) + name)
        if name.endswith("/"):
            parents.append(name)
    return paths


def test_contributing_layout_matches_the_tree():
    listed = _layout_listing()
    assert len(listed) == len(set(listed)), "a path is listed twice"
    missing_from_tree = [p for p in listed if not (ROOT / p.rstrip("/")).exists()]
    assert not missing_from_tree, f"listed but not in the tree: {missing_from_tree}"
    # Every module and package of the library; a package's line stands for its __init__.py.
    expected = set()
    for path in SRC.rglob("*.py"):
        relative = path.relative_to(ROOT)
        if "__pycache__" in relative.parts:
            continue
        if path.name == "__init__.py" and path.parent != SRC:
            expected.add(relative.parent.as_posix() + "/")
        else:
            expected.add(relative.as_posix())
    not_listed = sorted(expected - set(listed))
    assert not not_listed, f"CONTRIBUTING.md's layout does not list: {not_listed}"


def test_changelog_page_mirrors_changelog():
    assert (DOCS / "changelog.md").resolve() == (ROOT / "CHANGELOG.md").resolve()


def test_changelog_link_rewrite():
    hooks = _load(DOCS / "hooks.py", "docs_hooks")
    text = (
        "See [the model](docs/threat-model.md#keys) and [spec](./docs/spec.md), "
        "[site](https://example.org/docs/x.md).\n[ref]: docs/methods.md\n"
    )
    assert hooks.rewrite_changelog_links(text) == (
        "See [the model](threat-model.md#keys) and [spec](spec.md), "
        "[site](https://example.org/docs/x.md).\n[ref]: methods.md\n"
    )


def test_cli_reference_is_current():
    generator = _load(DOCS / "gen_cli_reference.py", "gen_cli_reference")
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == generator.generate(), (
        "docs/cli.md is stale: run python docs/gen_cli_reference.py"
    )


def _all_commands(command: click.Command, path: str):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            if not sub.hidden:
                yield from _all_commands(sub, f"{path} {name}")


def test_cli_reference_lists_every_command_and_option():
    from postcode_privacy.cli import cli

    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    sections = re.split(r"^#{2,6} ", text, flags=re.MULTILINE)
    by_title = {s.split("\n", 1)[0].strip().strip("`"): s for s in sections}
    commands = list(_all_commands(cli, "postcode-privacy"))
    assert len(commands) >= 2
    for path, command in commands:
        assert path in by_title, f"no section for {path}"
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                for opt in param.opts:
                    assert opt in by_title[path], f"{path}: {opt} missing"
            elif isinstance(param, click.Argument):
                shown = param.metavar or param.name.upper()
                assert f"`{shown}" in by_title[path], f"{path}: argument {param.name}"


def test_every_relative_link_resolves():
    problems = []
    for page in _pages():
        base = Path(os.path.realpath(page)).parent  # the changelog resolves from the repo root
        for number, target in _links(page):
            if EXTERNAL.match(target):
                continue
            where = f"{page.relative_to(DOCS)}:{number}: {target}"
            if target.startswith("/"):
                problems.append(f"{where} (absolute path)")
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (base / file_part).resolve() if file_part else Path(os.path.realpath(page))
            if not resolved.exists():
                problems.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                problems.append(f"{where} (no such heading)")
    assert not problems, "\n".join(problems)


def test_link_checker_sees_broken_links(tmp_path):
    """The checker's parsing finds inline, image and reference links, and ignores code."""
    page = tmp_path / "p.md"
    page.write_text(
        '# Title\n\n[a](x.md) ![b](img.png "t") `[c](code.md)`\n\n```\n[d](e.md)\n```\n'
        "[ref]: y.md#z\n",
        encoding="utf-8",
    )
    assert [t for _, t in _links(page)] == ["x.md", "img.png", "y.md#z"]
    assert _anchors(page) == {"title"}
    page.write_text("# `code` title\n\n## Same\n\n## Same\n", encoding="utf-8")
    assert _anchors(page) == {"code-title", "same", "same_1"}


# Section names the code cites, on any docs page: (docs/methods.md, "Choosing the radius"),
# (docs/methods.md, section "The graph"), docs/performance.md ("The ball-mass profile table").
CITATION = re.compile(r"docs/([\w-]+)\.md(?:,\s*(?:section\s+)?|\s+section\s+|\s*\()\"([^\"]+)\"")
# Any docs page the code names, cited with a section or not.
PAGE = re.compile(r"docs/([\w-]+)\.md")


def _cited_texts():
    sources = sorted(SRC.rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    for path in sources:
        if path.name == "test_docs.py":
            continue
        text = path.read_text(encoding="utf-8")
        yield path.relative_to(ROOT), re.sub(r"\n\s*#?\s*", " ", text)  # wrapped lines joined


def _citations():
    for path, joined in _cited_texts():
        for match in CITATION.finditer(joined):
            yield path, f"{match.group(1)}.md", " ".join(match.group(2).split())


def test_pages_cited_by_the_code_exist():
    missing = sorted(
        f"{src} cites docs/{match.group(1)}.md"
        for src, joined in _cited_texts()
        for match in PAGE.finditer(joined)
        if not (DOCS / f"{match.group(1)}.md").is_file()
    )
    assert not missing, "\n".join(missing)


def test_sections_cited_by_the_code_exist():
    citations = list(_citations())
    cited_pages = {page for _, page, _ in citations}
    assert {"methods.md", "threat-model.md", "spec.md"} <= cited_pages
    missing = [
        f'{src} cites {page} "{section}"'
        for src, page, section in citations
        if section not in _headings(DOCS / page)
    ]
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize("page", ["index.md", "how-it-works.md"])
def test_data_sources_are_credited(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    for phrase in (
        "Crown copyright and database right",
        "Ordnance Survey",
        "Open Government Licence",
        "ONS Postcode Directory",
        "Royal Mail",
    ):
        assert phrase in text, f"{page} does not credit {phrase}"


def test_no_page_names_a_developer_machine_path():
    """Commands in the docs use the activated environment's ``python``, never a path that only
    exists on the machine the page was written on."""
    pages = [*_pages(), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    found = [
        f"{p.name}:{n}"
        for p in pages
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"(?<![\w.])/(?:work|home|root|Users)/", line)
    ]
    assert not found, found
