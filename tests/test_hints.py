"""The hints autotrain prints about a missing package or folder (autotrain/hints.py): `pip install` on a
machine of one's own; in the Docker image (AUTOTRAIN_IMAGE=1, set by its Dockerfile) the build argument that
installs the package, `--user` for a mounted folder of another uid, and `-v "$PWD":/workspace` where nothing
is mounted. `.ci/docker-check` checks the same in the built image."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from pathlib import Path

import pytest
import tomllib
from test_hostile_runs import llm_config, one_error_line, read_only

from autotrain import hints

ROOT = Path(__file__).resolve().parents[1]
IMAGE = {hints.IMAGE: "1"}
# The only strings of the package that say `pip install` outside autotrain/hints.py, and why they may.
NOT_HINTS = {
    "config/base.py": "field descriptions (the JSON Schema's documentation, not a message): the ray extra; "
    "cluster.setup's default, a command run on the cluster",
    "config/benchmark.py": "the benchmark field's description in the JSON Schema",
    "config/llm.py": "the gguf field's description in the JSON Schema",
    "run/cluster_specs.py": "SkyPilot's setup command on the cluster (`pip install -e .`), not a hint",
}


@pytest.fixture
def image(monkeypatch):
    monkeypatch.setenv(hints.IMAGE, "1")


def test_outside_the_image_a_hint_is_pip(monkeypatch):
    for value in (None, "", "0", "yes"):
        if value is None:
            monkeypatch.delenv(hints.IMAGE, raising=False)
        else:
            monkeypatch.setenv(hints.IMAGE, value)
        assert not hints.in_image()
        assert hints.install_hint("wandb") == "pip install wandb"
        assert hints.install_hint(extra="ray") == "pip install 'autotrain[ray]'"
        assert hints.compiler_hint() == "install one (apt-get install build-essential)"


def test_in_the_image_a_hint_names_the_build_argument(image):
    build = 'build the image again with it: docker build --build-arg EXTRA_PACKAGES="{}" -t autotrain .'
    assert hints.install_hint("wandb") == build.format("wandb")
    assert hints.install_hint("flash-attn --no-build-isolation") == build.format("flash-attn --no-build-isolation")
    assert hints.compiler_hint() == "build the image again with one: docker build --build-arg COMPILER=1 -t autotrain ."


def test_an_extra_is_named_by_its_packages_in_the_image(image):
    """`pip install 'autotrain[x]'` cannot be given to the build (it would look for autotrain on PyPI): the
    extra's own requirements are, as pyproject.toml declares them."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def names(requirements):
        return sorted(r.split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip() for r in requirements)

    assert names(hints.extra_requirements("benchmark")) == names(declared["benchmark"]) == ["lm-eval"]
    assert hints.extra_requirements("ray") == ["ray[train]>=2.44"]
    assert 'EXTRA_PACKAGES="ray[train]>=2.44"' in hints.install_hint(extra="ray")
    # `tasks` names autotrain's other extras: their packages, each once
    nested = re.fullmatch(r"autotrain\[(.*)\]", declared["tasks"][0]).group(1).split(",")
    assert set(names(hints.extra_requirements("tasks"))) == {n for extra in nested for n in names(declared[extra])}
    assert len(hints.extra_requirements("tasks")) == len(set(hints.extra_requirements("tasks")))


def test_an_extra_without_metadata_is_named_by_its_place(image, monkeypatch):
    from importlib import metadata

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "requires", not_installed)
    assert hints.extra_requirements("ray") == []
    assert 'EXTRA_PACKAGES="<the packages of the ray extra in pyproject.toml>"' in hints.install_hint(extra="ray")


def test_every_install_hint_of_the_package_comes_from_one_function():
    """No string of the package says `pip install` or `apt-get install` on its own (docstrings and comments
    aside): each hint is made by autotrain/hints.py, so the image's hints name its build arguments."""
    found = []
    for path in sorted((ROOT / "autotrain").rglob("*.py")):
        name = path.relative_to(ROOT / "autotrain").as_posix()
        if name == "hints.py" or name in NOT_HINTS:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) and id(node) not in docstrings else None
            if isinstance(text, str) and ("pip install" in text or "apt-get install" in text):
                found.append(f"{name}:{node.lineno}: {text!r}")
    assert not found, "\n".join(found)
    for name in NOT_HINTS:  # each exemption still names a file that has such a string
        assert "pip install" in (ROOT / "autotrain" / name).read_text(), name


# --- the hints where they are printed ---------------------------------------------------------------------


def without(monkeypatch, module: str) -> None:
    """`module` as if not installed, for the checks that look it up with importlib.util.find_spec."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))


def test_a_missing_logger_in_the_image_names_the_build_argument(cli, tmp_path, monkeypatch):
    without(monkeypatch, "mlflow")
    config = llm_config(tmp_path, log="mlflow")
    line = one_error_line(cli("llm", "--config", config, "--dry-run", env=IMAGE), "log: mlflow")
    assert line.endswith(
        'build the image again with it: docker build --build-arg EXTRA_PACKAGES="mlflow" -t autotrain . '
        "(or set `log: none`)"
    ), line
    assert "pip install" not in line  # outside the image: tests/test_loggers.py


def test_a_missing_task_extra_in_the_image_names_its_packages(image, monkeypatch):
    from dataclasses import replace

    from autotrain.config import tasks
    from autotrain.errors import UserInputError
    from autotrain.inference.tasks import task_module

    monkeypatch.setitem(tasks.TASKS, "seq2seq", replace(tasks.TASKS["seq2seq"], packages=("no_such_package_here",)))
    build = 'docker build --build-arg EXTRA_PACKAGES="rouge-score>=0.1.2 sacrebleu>=2.4" -t autotrain .'
    said = tasks.missing_extra("seq2seq")
    assert said == f"task `seq2seq` needs no_such_package_here: build the image again with it: {build}"
    with pytest.raises(UserInputError, match="EXTRA_PACKAGES"):
        task_module("seq2seq")  # predict / evaluate of such a run


# --- folders ----------------------------------------------------------------------------------------------


def test_the_owner_is_the_nearest_existing_folders(tmp_path):
    assert hints._owner(tmp_path / "a" / "b") == os.stat(tmp_path).st_uid
    assert hints._owner(tmp_path) == os.getuid()


def test_a_folder_of_another_uid_in_the_image_says_user(image, monkeypatch, tmp_path):
    assert hints.cannot_write_hint(tmp_path, "elsewhere") == "elsewhere"  # this uid owns it: --user changes nothing
    monkeypatch.setattr(hints, "_owner", lambda path: os.getuid() + 1)
    said = hints.cannot_write_hint(tmp_path, "elsewhere")
    assert said == (
        f"the container runs as uid {os.getuid()} and the folder belongs to uid {os.getuid() + 1}: start the "
        'container as yourself: docker run --user "$(id -u):$(id -g)" ...'
    )
    monkeypatch.delenv(hints.IMAGE)
    assert hints.cannot_write_hint(tmp_path, "elsewhere") == "elsewhere"


def test_an_unwritable_project_folder_in_the_image_says_user(cli, tmp_path, monkeypatch):
    locked = tmp_path / "workspace"
    config = llm_config(tmp_path, locked / "runs" / "quickstart")
    monkeypatch.setattr(hints, "_owner", lambda path: 4321 if os.getuid() != 4321 else 4322)
    with read_only(locked):
        line = one_error_line(cli("llm", "--config", config, env=IMAGE), "cannot write to", "belongs to uid 43")
        assert line.endswith('start the container as yourself: docker run --user "$(id -u):$(id -g)" ...'), line
        line = one_error_line(cli("llm", "--config", config, env={hints.IMAGE: None}), "cannot write to")
        assert line.endswith("choose a project_name in a folder you can write to"), line


def test_the_mount_table_says_what_is_mounted(tmp_path):
    assert hints._mounted(Path("/"))
    assert not hints._mounted(tmp_path)


def test_a_missing_config_in_the_image_says_how_to_mount_the_folder(cli, image, monkeypatch, tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.setattr(hints, "WORKSPACE", workspace)
    monkeypatch.chdir(workspace)
    mount = 'start the container in the folder that holds your configs and data, with -v "$PWD":/workspace'
    for command in (["llm", "--config"], ["validate"]):
        result = cli(*command, "configs/llm/quickstart.yml")
        assert result.exit_code == 2
        assert (
            f"configs/llm/quickstart.yml: <root>: config file not found; nothing is mounted at {workspace}: {mount}"
            in result.stderr.splitlines()
        ), result.stderr
    monkeypatch.setattr(hints, "_mounted", lambda folder: True)  # mounted, but from a folder with nothing in it
    assert f"{workspace}, the folder mounted there, is empty: {mount}" in cli("validate", "x.yml").stderr
    (workspace / "data.jsonl").write_text("")  # a folder of the user's: the path is simply wrong
    assert cli("validate", "x.yml").stderr.splitlines()[0] == "x.yml: <root>: config file not found"
    monkeypatch.delenv(hints.IMAGE)
    monkeypatch.setattr(hints, "_mounted", lambda folder: False)
    assert cli("validate", "x.yml").stderr.splitlines()[0] == "x.yml: <root>: config file not found"
