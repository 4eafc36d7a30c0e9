"""What a run or an export writes is readable by whoever may read the folder: safetensors writes its files
0600, which left the weights of a run unreadable to the other users of a machine, or to the host of a
container whose user differs."""

from __future__ import annotations

import os
import stat

import pytest

from autotrain.training.folder import share_like_umask


def mode(path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def umask():
    previous = os.umask(0o022)

    def set_to(value: int) -> None:
        os.umask(value)

    yield set_to
    os.umask(previous)


def test_weights_written_owner_only_get_the_umasks_mode(tmp_path, umask):
    import torch
    from safetensors.torch import save_file

    umask(0o022)
    (tmp_path / "sub").mkdir()
    weights = tmp_path / "sub" / "model.safetensors"
    save_file({"w": torch.zeros(2)}, str(weights))
    other = tmp_path / "notes.txt"
    other.write_text("x")
    other.chmod(0o640)  # a mode someone chose is left alone
    private = tmp_path / "mine.env"  # not a file of the run's: left as its owner made it
    private.write_text("x")
    private.chmod(0o600)
    (tmp_path / "link.safetensors").symlink_to(weights)
    assert mode(weights) == 0o600  # what the library does

    share_like_umask(tmp_path)
    assert (mode(weights), mode(other), mode(private)) == (0o644, 0o640, 0o600)


def test_a_private_umask_keeps_them_private(tmp_path, umask):
    umask(0o077)
    secret = tmp_path / "model.safetensors"
    secret.write_text("x")
    secret.chmod(0o600)
    share_like_umask(tmp_path)
    assert mode(secret) == 0o600
