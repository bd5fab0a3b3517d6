"""``postcode-privacy keygen``: a new secret key in a new owner-only file."""

from __future__ import annotations

import click

from ..cli import cli, echo_status


@cli.command("keygen")
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    metavar="KEYFILE",
    type=click.Path(dir_okay=False, writable=False),
    help="Key file to create.  Nothing may exist at that path: a key file is never written "
    "over another file, and there is no --force.",
)
def keygen_command(output: str) -> None:
    """Create a new key from the operating system's CSPRNG.

    The file is created exclusively with owner-only permissions (0600).  Store it as you store
    the source data: anyone holding it can undo the protection.  Prints the key's fingerprint,
    which manifests record in place of the key.  A key is exactly 32 bytes; a key file that
    group or others can read is refused.
    """
    from .._interrupts import note_files_in_place
    from .._signal_holds import signals_deferred
    from ..keyfile import write_key_file
    from ..mechanism import Key

    key = Key.generate()
    # A stop once the key is written must say so, not "interrupted" (which says nothing was
    # written): held until that is noted.
    with signals_deferred():
        write_key_file(key, output)
        note_files_in_place()
    # (lines about a file already written: a closed stdout does not make the run a failure)
    echo_status(f"wrote a new key to {click.format_filename(output)}")
    echo_status(f"fingerprint: {key.fingerprint}")
