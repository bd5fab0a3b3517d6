"""The command line: a thin layer over the library.

``main(argv)`` can be called from tests.  Library errors become exit codes in exactly one place,
:func:`main`, using ``EXIT_CODES``; messages name rows and reasons, never values.
"""

from __future__ import annotations

import sys

import click

from . import errors
from .version import OUTPUT_STABILITY_VERSION, __version__

# Documented in docs/cli.md.  Order matters: the first matching class wins.
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (errors.InputDataError, 3),
    (errors.KeyFileError, 4),
    (errors.OutputExistsError, 5),
    (errors.ArtefactError, 6),
    (errors.GraphError, 6),
    (errors.SourceDataError, 7),
    (errors.InvalidParameterError, 8),
    (errors.UnknownPostcodeError, 3),
    (errors.PostcodePrivacyError, 1),
]
EXIT_INTERRUPTED = 130


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, message=f"%(prog)s %(version)s (output-stability {OUTPUT_STABILITY_VERSION})")
def cli() -> None:
    """Release UK postcodes under metric differential privacy on a postcode graph."""


def _exit_code(exc: BaseException) -> int:
    for cls, code in EXIT_CODES:
        if isinstance(exc, cls):
            return code
    return 1


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code (never raises for library errors)."""
    try:
        cli.main(args=argv, prog_name="postcode-privacy", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except click.exceptions.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except errors.PostcodePrivacyError as exc:
        click.echo(f"error: {exc}", err=True)
        for row, reason in getattr(exc, "row_errors", []):
            click.echo(f"  row {row}: {reason}", err=True)
        shown = len(getattr(exc, "row_errors", []))
        total = getattr(exc, "total_errors", shown)
        if total > shown:
            click.echo(f"  ... and {total - shown} more rows", err=True)
        return _exit_code(exc)
    return 0


def entry_point() -> None:
    sys.exit(main())


# Sub-commands register themselves on ``cli`` from their own modules; importing them here keeps
# the whole command surface visible in one place.
from . import commands  # noqa: E402,F401
