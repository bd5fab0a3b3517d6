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
