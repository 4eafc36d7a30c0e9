"""The Dockerfile, read with a small instruction parser (no Docker engine needed): a CUDA PyTorch base,
this package installed with its dependencies, a non-root user, HF_HOME on a volume, the CLI as entrypoint;
and a .dockerignore that keeps environments, runs, caches and history out of the build context."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KNOWN = {
    "FROM",
    "ARG",
    "ENV",
    "RUN",
    "COPY",
    "ADD",
    "WORKDIR",
    "USER",
    "VOLUME",
    "ENTRYPOINT",
    "CMD",
    "LABEL",
    "EXPOSE",
    "HEALTHCHECK",
    "SHELL",
    "STOPSIGNAL",
    "ONBUILD",
}


def parse_dockerfile(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs: comments dropped, `\\` continuations joined, as Docker reads them."""
    instructions, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    assert not pending, "the Dockerfile ends inside a `\\` continuation"
    return instructions


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"not an exec-form list: {args}"
    return value


def key_values(args: str) -> dict[str, str]:
    """ENV / ARG arguments: `K=V K2="V 2"` (or the legacy `K V`)."""
    words = shlex.split(args)
    if len(words) >= 2 and "=" not in words[0]:
        return {words[0]: " ".join(words[1:])}
    return dict(word.partition("=")[::2] for word in words)


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return parse_dockerfile((ROOT / "Dockerfile").read_text())


def values(instructions, keyword: str) -> list[str]:
    return [args for kw, args in instructions if kw == keyword]


def substitute(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), text)


def test_every_instruction_is_known(dockerfile):
    assert dockerfile, "empty Dockerfile"
    assert {kw for kw, _ in dockerfile} <= KNOWN
    first = next(kw for kw, _ in dockerfile if kw != "ARG")
    assert first == "FROM", "only ARG may come before FROM"


def test_base_image_is_cuda_pytorch(dockerfile):
    (image,) = values(dockerfile, "FROM")
    before_from = {}
    for kw, args in dockerfile:
        if kw == "FROM":
            break
        if kw == "ARG":
            before_from.update(key_values(args))
    image = substitute(image, before_from)
    assert re.fullmatch(r"pytorch/pytorch:\d+\.\d+(\.\d+)?-cuda\d+\.\d+-cudnn\d+-(runtime|devel)", image), image


def test_installs_this_package_with_its_dependencies(dockerfile):
    runs = " ".join(values(dockerfile, "RUN"))
    copies = [shlex.split(args) for args in values(dockerfile, "COPY")]
    assert any(c[:-1] == ["."] for c in copies), "the source tree is not copied"
    assert any("pyproject.toml" in c[:-1] for c in copies)
    assert re.search(r"pip install (--no-deps )?\.(\s|$)", runs), "the package itself is not installed"
    # dependencies come from pyproject.toml, so the image cannot drift from the package
    assert "tomllib" in runs and "['project']['dependencies']" in runs
    # the base image's CUDA torch satisfies the requirement (`pip install torch` would replace it)
    assert not re.search(r"pip install[^&;]*\btorch\b", runs)


def test_entrypoint_is_the_cli(dockerfile):
    (entrypoint,) = values(dockerfile, "ENTRYPOINT")
    (script,) = metadata.entry_points(group="console_scripts", name="autotrain")
    assert exec_form(entrypoint) == [script.name] and script.value == "autotrain.cli.main:main"
    assert exec_form(values(dockerfile, "CMD")[-1]) == ["--help"]


def test_runs_as_a_non_root_user(dockerfile):
    users = values(dockerfile, "USER")
    assert users and users[-1].split(":")[0] not in ("root", "0")
    last_user = max(i for i, (kw, _) in enumerate(dockerfile) if kw == "USER")
    assert all(kw != "RUN" for kw, _ in dockerfile[last_user:]), "a RUN after USER would need root"
    assert f"useradd --create-home --uid 1000 --shell /bin/bash {users[-1]}" in " ".join(values(dockerfile, "RUN"))


def test_hf_home_is_a_volume(dockerfile):
    env = {}
    for args in values(dockerfile, "ENV"):
        env.update(key_values(args))
    volumes = [v for args in values(dockerfile, "VOLUME") for v in exec_form(args)]
    assert env.get("HF_HOME") in volumes
    assert "/workspace" in values(dockerfile, "WORKDIR")


def ignored(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes; a match on a parent dir counts."""
    parts = path.split("/")
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").strip("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            if fnmatch.fnmatch(prefix, pattern) or (
                pattern.startswith("**/") and fnmatch.fnmatch(parts[depth - 1], pattern[3:])
            ):
                result = not negate
                break
    return result


def test_dockerignore_keeps_the_context_small():
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    for path in [
        ".venv/bin/python",
        ".git/HEAD",
        "runs/my-run/model.safetensors",
        "autotrain/__pycache__/x.pyc",
        ".pytest_cache/v",
        ".ruff_cache/x",
        "dist/autotrain.whl",
        "my-run/checkpoint-10/model.safetensors",
    ]:
        assert ignored(patterns, path), f"{path} would be sent to the Docker build"
    for path in ["pyproject.toml", "README.md", "autotrain/cli/main.py", "autotrain/templates/llm/sft.yml"]:
        assert not ignored(patterns, path), f"{path} is needed by `pip install .`"


def test_docs_show_build_and_run():
    docs = (ROOT / "README.md").read_text()
    assert "docker build -t autotrain ." in docs
    run = next(line for line in docs.splitlines() if line.startswith("docker run --gpus all"))
    assert '-v "$PWD":/workspace' in run and "autotrain llm --config" in docs
