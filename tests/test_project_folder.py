"""The project folder's lifecycle and the YAML reader's edges, in-process (the CLI-level cases are in
test_hostile.py)."""

from __future__ import annotations

import json
import os

import pytest

from autotrain.config.interpolate import interpolate
from autotrain.config.yaml_source import parse_yaml
from autotrain.errors import ConfigError, UserInputError
from autotrain.run.project import LOCK, MARKER, ProjectFolder


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_claim_marks_and_locks_a_new_folder(tmp_path):
    from autotrain.training.lifetime import identity

    project = ProjectFolder(tmp_path / "runs" / "a").claim(resume=None, overwrite=False)
    assert (tmp_path / "runs" / "a" / MARKER).is_file()
    assert json.loads((tmp_path / "runs" / "a" / LOCK).read_text()) == identity()  # pid, start time, host
    with pytest.raises(UserInputError, match=rf"in use by another run \(pid {os.getpid()}\)"):
        ProjectFolder(tmp_path / "runs" / "a").claim(resume=None, overwrite=True)
    project.release()
    assert (tmp_path / "runs" / "a" / LOCK).read_text() == ""  # released cleanly: no holder named
    again = ProjectFolder(tmp_path / "runs" / "a").claim(resume=None, overwrite=False)  # free again
    assert again.took_over is None
    again.release()


def test_a_lock_left_by_a_killed_run_is_taken_over_naming_it(tmp_path):
    """A free lock that still names its holder was left by a process that ended without releasing it."""
    import subprocess
    import sys

    from autotrain.training.lifetime import identity

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed = identity(child.pid)
    child.kill()
    child.wait()
    folder = tmp_path / "runs" / "a"
    ProjectFolder(folder).claim(resume=None, overwrite=False).release()
    (folder / LOCK).write_text(json.dumps(killed) + "\n")
    project = ProjectFolder(folder).claim(resume=None, overwrite=False)
    assert project.took_over == killed
    project.release()


def test_overwrite_empties_only_a_folder_autotrain_made(tmp_path):
    foreign = tmp_path / "out"
    foreign.mkdir()
    (foreign / "run.json").write_text("{}")
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(UserInputError, match="not made by autotrain"):
        ProjectFolder(foreign).claim(resume=None, overwrite=True)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt", "run.json"]

    ours = tmp_path / "ours"
    ProjectFolder(ours).claim(resume=None, overwrite=False).release()
    (ours / "run.json").write_text("{}")
    (ours / "checkpoint-1").mkdir()
    with pytest.raises(UserInputError, match="already holds a run"):
        ProjectFolder(ours).claim(resume=None, overwrite=False)
    ProjectFolder(ours).claim(resume=None, overwrite=True).release()
    assert sorted(p.name for p in ours.iterdir()) == [MARKER, LOCK]


def test_a_folder_of_other_files_is_refused(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.jsonl").write_text("{}\n")
    with pytest.raises(UserInputError, match="not an autotrain run"):
        ProjectFolder(tmp_path / "data").claim(resume=None, overwrite=False)
    assert [p.name for p in (tmp_path / "data").iterdir()] == ["train.jsonl"]


def test_abandon_leaves_no_trace(tmp_path):
    project = ProjectFolder(tmp_path / "new").claim(resume=None, overwrite=False)
    (tmp_path / "new" / "run.json").write_text("{}")
    project.abandon()
    assert not (tmp_path / "new").exists()

    (tmp_path / "empty").mkdir()
    project = ProjectFolder(tmp_path / "empty").claim(resume=None, overwrite=False)
    project.abandon()
    assert (tmp_path / "empty").is_dir() and not any((tmp_path / "empty").iterdir())  # the user's folder stays


def test_working_directory_is_never_claimed(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(UserInputError, match="folder you run from"):
        ProjectFolder(tmp_path).claim(resume=None, overwrite=True)
    assert (tmp_path / "keep.txt").read_text() == "x"


def test_yaml_merge_keys_marks_and_duplicates():
    data, locator = parse_yaml("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\nd2: 1\nd2: 2\n", "f.yml")
    assert data["d"] == {"x": 1, "y": 3}
    assert locator.marks[("d", "y")] == (4, 3)
    [dup] = locator.problems
    assert dup.path == ("d2",) and "lines 5 and 6" in dup.message and dup.line == 6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &a [*a]\n", "contains it"),
        ("a: *nope\n", "no anchor"),
        ("a: !!python/object:os.system x\n", "not supported"),
        ("a: 1\n---\nb: 2\n", "second one"),
        ("a: " + "[" * 40 + "]" * 40 + "\n", "levels deep"),
    ],
)
def test_yaml_refusals(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_yaml(text, "f.yml")


def test_interpolation_nests_and_escapes():
    env = {"B": "bee", "HF_TOKEN": "hf_x"}
    data, problems, secrets = interpolate(
        {"a": "${A:-${B:-x}}", "b": "${A:-${C:-x}}", "c": "$${X} and ${HF_TOKEN}", "d": "${NOPE}"}, env
    )
    assert data["a"] == "bee" and data["b"] == "x" and data["c"] == "${X} and hf_x"
    assert secrets == {"hf_x"}
    assert problems == [(("d",), "environment variable `NOPE` is not set (and no `${NOPE:-default}`)")]
