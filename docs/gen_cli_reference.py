"""Generate docs/cli.md from the click parser, so the CLI reference cannot drift from the code.

Usage (from the repository root)::

    python docs/gen_cli_reference.py           # rewrite docs/cli.md
    python docs/gen_cli_reference.py --check   # exit 1 if docs/cli.md is out of date

Everything on the page comes from ``postcode_privacy.cli``: the group's help, every
sub-command (and sub-group, recursively) with its usage line, help text, arguments and options
exactly as ``--help`` describes them, and the exit-code table ``cli.EXIT_CODES``.  The output
depends only on the parser, not on the terminal width or the machine, so tests/test_docs.py can
compare it byte for byte.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
from pathlib import Path

import click

PROG = "postcode-privacy"
OUTPUT = Path(__file__).resolve().parent / "cli.md"
SCRIPT = "docs/gen_cli_reference.py"

# Exit codes that click and cli.main produce without a library exception class behind them.
_FIXED_EXIT_CODES = [
    (0, "success"),
    (1, "any other library error (`PostcodePrivacyError`)"),
    (2, "usage error: unknown option, missing or invalid argument (reported by click)"),
]

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def _escape(text: str) -> str:
    """Escape Markdown and HTML specials outside code spans; keep code spans verbatim."""
    out, pos = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_escape_plain(text[pos : match.start()]))
        out.append(match.group(0))
        pos = match.end()
    out.append(_escape_plain(text[pos:]))
    return "".join(out)


def _escape_plain(text: str) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\*_\[\]|#])", r"\\\1", text)


def _cell(text: str) -> str:
    """A table cell: one line, escaped."""
    return _escape(" ".join(text.split())) or " "


def _help_blocks(help_text: str | None) -> list[str]:
    """Paragraphs of a click help text as Markdown blocks.

    Follows click's conventions: text after ``\\f`` is hidden, and a paragraph introduced by a
    ``\\b`` line keeps its line breaks (rendered here as a preformatted block).
    """
    if not help_text:
        return []
    text = inspect.cleandoc(help_text).split("\f", 1)[0]
    blocks = []
    for para in re.split(r"\n\s*\n", text.strip()):
        lines = para.splitlines()
        if lines and lines[0].strip() == "\b":
            body = "\n".join(lines[1:]).rstrip()
            if body:
                blocks.append(f"```text\n{body}\n```")
        else:
            blocks.append(_escape(" ".join(line.strip() for line in lines)))
    return blocks


def _metavar(param: click.Parameter, ctx: click.Context) -> str:
    try:
        return param.make_metavar(ctx)
    except TypeError:  # click < 8.2: make_metavar() takes no context
        return param.make_metavar()


def _usage(command: click.Command, ctx: click.Context) -> str:
    return " ".join([ctx.command_path, *command.collect_usage_pieces(ctx)])


def _arguments_table(command: click.Command, ctx: click.Context) -> list[str]:
    args = [p for p in command.get_params(ctx) if isinstance(p, click.Argument)]
    if not args:
        return []
    lines = ["**Arguments**", "", "| Argument | Required | Repeatable |", "| --- | --- | --- |"]
    for arg in args:
        lines.append(
            f"| `{_metavar(arg, ctx)}` | {'yes' if arg.required else 'no'} "
            f"| {'yes' if arg.nargs == -1 or arg.multiple else 'no'} |"
        )
    return lines + [""]


def _options_table(command: click.Command, ctx: click.Context) -> list[str]:
    rows = []
    for param in command.get_params(ctx):
        if isinstance(param, click.Argument):
            continue
        record = param.get_help_record(ctx)
        if record is None:  # hidden option
            continue
        names, help_text = record
        rows.append(f"| `{names}` | {_cell(help_text)} |")
    if not rows:
        return []
    return ["**Options**", "", "| Option | Description |", "| --- | --- |", *rows, ""]


def _walk(command: click.Command, ctx: click.Context) -> list[tuple[click.Command, click.Context]]:
    """The command and all its sub-commands, depth first, sub-commands in name order."""
    found = [(command, ctx)]
    if isinstance(command, click.Group):
        for name in sorted(command.list_commands(ctx)):
            sub = command.get_command(ctx, name)
            if sub is None or getattr(sub, "hidden", False):
                continue
            sub_ctx = click.Context(sub, info_name=name, parent=ctx, **sub.context_settings)
            found.extend(_walk(sub, sub_ctx))
    return found


def _command_section(command: click.Command, ctx: click.Context, level: int) -> list[str]:
    lines = [f"{'#' * level} `{ctx.command_path}`", ""]
    if getattr(command, "deprecated", False):
        lines += ["**Deprecated.**", ""]
    for block in _help_blocks(command.help):
        lines += [block, ""]
    lines += ["```text", f"Usage: {_usage(command, ctx)}", "```", ""]
    lines += _arguments_table(command, ctx)
    lines += _options_table(command, ctx)
    return lines


def _exit_code_table() -> list[str]:
    from postcode_privacy import cli as cli_module

    by_code: dict[int, list[str]] = {}
    for cls, code in cli_module.EXIT_CODES:
        if cls.__name__ == "PostcodePrivacyError":
            continue
        summary = (inspect.getdoc(cls) or "").split("\n\n", 1)[0]
        by_code.setdefault(code, []).append(f"`{cls.__name__}`: {' '.join(summary.split())}")
    rows = {code: _escape(text) for code, text in _FIXED_EXIT_CODES}
    for code, texts in by_code.items():
        rows[code] = "<br>".join(_escape(t) for t in texts)
    rows[cli_module.EXIT_INTERRUPTED] = "interrupted (Ctrl-C, SIGTERM, SIGHUP)"
    rows[cli_module.EXIT_READER_GONE] = (
        "standard output's reader went away (a pipe into `head`): the command stopped "
        "printing, as one killed by SIGPIPE would; any file it writes was written first"
    )
    lines = ["| Code | Meaning |", "| --- | --- |"]
    lines += [f"| {code} | {rows[code]} |" for code in sorted(rows)]
    return lines


def generate() -> str:
    """The complete text of docs/cli.md."""
    from postcode_privacy.cli import cli

    root_ctx = click.Context(cli, info_name=PROG, **cli.context_settings)
    commands = _walk(cli, root_ctx)
    lines = [
        "# CLI reference",
        "",
        f"<!-- Generated from the click parser by {SCRIPT}; do not edit by hand. -->",
        "",
        f"This page is generated from the parser itself (`python {SCRIPT}`), and the test suite",
        "fails if it differs from what the code would generate, so it always matches",
        f"`{PROG} COMMAND --help`.",
        "",
    ]
    lines += ["## Commands", "", "| Command | Summary |", "| --- | --- |"]
    for command, ctx in commands[1:]:
        anchor = _anchor(ctx.command_path)
        lines.append(
            f"| [`{ctx.command_path}`](#{anchor}) | {_cell(command.get_short_help_str(limit=200))} |"
        )
    lines += [
        "",
        "## Exit codes",
        "",
        "Library errors become exit codes in one place (`postcode_privacy.cli.main`). Error",
        "messages name row numbers and reasons, never postcodes or identifiers.",
        "",
        *_exit_code_table(),
        "",
    ]
    lines += _command_section(cli, root_ctx, 2)
    for command, ctx in commands[1:]:
        lines += _command_section(command, ctx, 2 + ctx.command_path.count(" ") - 1)
    return "\n".join(lines).rstrip("\n") + "\n"


def _anchor(command_path: str) -> str:
    """The id Python-Markdown's toc extension gives a heading "`<command path>`"."""
    from markdown.extensions.toc import slugify

    return slugify(command_path, "-")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is out of date: run python {SCRIPT}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
