"""Every atomic writer turns the same write failure into the same error (and exit code)."""

from __future__ import annotations

import errno

import pytest

from postcode_privacy import atomic
from postcode_privacy.cli import _exit_code
from postcode_privacy.errors import PostcodePrivacyError


def _disk_full(self):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("how", ["plain", "claimed"])
def test_a_full_disk_is_one_error_whichever_helper_writes(tmp_path, monkeypatch, how):
    monkeypatch.setattr(atomic.TempFile, "finish", _disk_full)
    target = tmp_path / "out.json"
    with pytest.raises(PostcodePrivacyError) as info:
        if how == "plain":
            atomic.write_atomic(target, b"{}")
        else:
            with atomic.OutputClaim([target]):
                atomic.write_atomic(target, b"{}")
    assert str(info.value) == "cannot write the output: No space left on device"
    assert _exit_code(info.value) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == []


def test_a_claim_that_is_not_the_runs_last_does_not_say_its_files_are_in_place(
    tmp_path, monkeypatch
):
    """``demo`` copies the example records before its release: a stop between the two said
    "interrupted after the files were written" with no release written (a review of round
    28).  Only a claim on the run's last files says so."""
    from postcode_privacy import _interrupts

    monkeypatch.setattr(_interrupts, "_in_place", [])
    with atomic.OutputClaim([tmp_path / "records.csv"], final=False):
        atomic.write_atomic(tmp_path / "records.csv", b"id\n")
    assert _interrupts.stop_message() == "interrupted"
    with atomic.OutputClaim([tmp_path / "release.csv"]):
        atomic.write_atomic(tmp_path / "release.csv", b"id\n")
    assert _interrupts.stop_message().startswith("interrupted after the files were written")


def test_the_graph_recognised_as_never_replaced_is_the_artefact_format():
    from postcode_privacy import _file_kinds
    from postcode_privacy.graph.artefact import MAGIC

    assert _file_kinds._GRAPH_PREFIX == MAGIC


def test_the_sidecar_recognised_as_never_replaced_is_builds():
    from postcode_privacy import _file_kinds
    from postcode_privacy.graph.artefact import TERMINATED_SUFFIX

    assert _file_kinds._GRAPH_SIDECAR_SUFFIX == TERMINATED_SUFFIX
