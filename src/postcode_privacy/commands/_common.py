"""What several commands do alike: find the key, load the graph, claim an output, show the
library's warnings, print JSON.  Each command module holds only its own command."""

from __future__ import annotations

import contextlib
import json
import warnings

import click


def resolve_key(key_path: str | None):
    """The release key: from ``--key KEYFILE``, else from $POSTCODE_PRIVACY_KEY.

    When both are given they must hold the same key: silently preferring one would re-perturb
    everyone under the other one's releases.
    """
    from ..errors import KeyFileError
    from ..keyfile import ENV_VAR, key_from_environment, read_key_file

    try:
        from_env = key_from_environment()
    except KeyFileError as exc:
        raise KeyFileError(f"${ENV_VAR}: {exc}") from None
    if key_path is None:
        if from_env is None:
            raise KeyFileError(
                f"no key: give --key KEYFILE or set ${ENV_VAR} to the key file's text"
            )
        return from_env
    key = read_key_file(key_path)
    if from_env is not None and from_env != key:
        raise KeyFileError(f"--key and ${ENV_VAR} hold different keys; give only one")
    return key


def graph_loader(graph_path: str | None, progress: bool):
    """A function loading the ``--graph`` artefact, or the embedded national graph."""
    if graph_path is not None:
        from ..graph import Graph

        return lambda: Graph.load(graph_path)

    def national():
        from ..graph.national import default_graph

        return default_graph(progress=progress)

    return national


def load_graph(graph_path: str | None, quiet: bool = False):
    """The ``--graph`` artefact, or the embedded national graph (built on first use, with a bar
    on a terminal and plain lines otherwise, unless ``quiet``)."""
    return graph_loader(graph_path, progress=not quiet)()


def terminated_locations_for(terminated: str, graph_path: str | None):
    """An artefact built from ONSPD carries its source's terminated postcodes beside it."""
    if terminated == "nearest" and graph_path is not None:
        from ..graph.artefact import terminated_sidecar

        sidecar = terminated_sidecar(graph_path)
        if sidecar.exists():  # checked against the artefact's record once the graph is loaded
            from ..release.terminated import read_sidecar

            return read_sidecar(sidecar)
    return None


def claim_output(output: str | None, force: bool, graph_path: str | None):
    """The exclusive claim on ``-o FILE`` (see atomic.OutputClaim), or nothing without -o;
    the ``--graph`` artefact the command reads is never that file, even with --force."""
    if output is None:
        return contextlib.nullcontext()
    from ..atomic import OutputClaim

    return OutputClaim([output], force=force, inputs={"the graph artefact": graph_path})


def emit_json(data: dict, output: str | None) -> None:
    """Print ``data`` as JSON, or write it to ``output`` (inside its :func:`claim_output`)."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        from ..atomic import write_atomic

        write_atomic(output, text.encode("utf-8"))


@contextlib.contextmanager
def echo_warnings(quiet: bool = False):
    """Print the library's warnings as ``warning: ...`` lines on stderr (after the block).

    A warning about the true records (subjects seen with two postcodes) is as private as the
    summary, whose last line says so; under ``quiet`` there is no summary, so a line after the
    warnings says it instead."""
    from ..atomic import LateSignalWarning
    from ..errors import CacheWarning, TeleportWarning
    from ..release import DuplicateSubjectWarning

    ours = (
        TeleportWarning,
        DuplicateSubjectWarning,
        LateSignalWarning,
        RecordsNotice,
        CacheWarning,
    )
    with warnings.catch_warnings(record=True) as caught:
        for category in ours:
            warnings.simplefilter("always", category)
        try:
            yield
        finally:
            others = []
            for item in caught:
                if issubclass(item.category, ours):
                    click.echo(f"warning: {item.message}", err=True)
                else:
                    others.append(item)
            about_records = (DuplicateSubjectWarning, RecordsNotice)
            if quiet and any(issubclass(i.category, about_records) for i in caught):
                click.echo(
                    "  the warning above describes the true records: keep it out of published logs",
                    err=True,
                )
    for item in others:
        warnings.showwarning(item.message, item.category, item.filename, item.lineno)


class RecordsNotice(UserWarning):
    """A line of the summary that ``-q`` must still print, about the true records."""
