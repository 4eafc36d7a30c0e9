"""The Dockerfile, read with a small instruction parser (no Docker engine needed): a CUDA PyTorch base,
this package installed with its dependencies and the extras the README's commands use, the base's torch
kept, a non-root user, HF_HOME on a volume, tini and the entrypoint script in front of the CLI; the
entrypoint script itself, run with sh; and a .dockerignore that keeps environments, runs, caches and
history out of the build context. `.ci/docker-check` builds the image and runs it (docs/docker.md)."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
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


def env_of(dockerfile) -> dict[str, str]:
    env = {}
    for args in values(dockerfile, "ENV"):
        env.update(key_values(args))
    return env


def test_installs_this_package_with_its_dependencies(dockerfile):
    runs = " ".join(values(dockerfile, "RUN"))
    copies = [shlex.split(args) for args in values(dockerfile, "COPY")]
    assert any(c[:-1] == ["."] for c in copies), "the source tree is not copied"
    assert any("pyproject.toml" in c[:-1] for c in copies)
    assert re.search(r"pip install (--quiet )?(--no-deps )?\.(\s|$)", runs), "the package itself is not installed"
    # dependencies come from pyproject.toml, so the image cannot drift from the package
    assert "tomllib" in runs and "['dependencies']" in runs
    # the extras a user of the README reaches for: the app, export, tensorboard; bitsandbytes with CUDA
    assert "extras['app']" in runs and "extras['export']" in runs and "'tensorboard'" in runs
    assert "['bitsandbytes'] if torch.version.cuda" in runs
    # the base image's CUDA torch satisfies the requirement (`pip install torch` would replace it)
    assert not re.search(r"pip install[^&;]*\btorch\b", runs)


def test_the_bases_torch_is_kept_by_every_later_install(dockerfile):
    """A dependency's new release must not make pip swap the base's CUDA torch for another build: the
    torch family the base holds is written to a constraints file that every pip run in the image obeys."""
    runs = " ".join(values(dockerfile, "RUN"))
    constraints = env_of(dockerfile)["PIP_CONSTRAINT"]
    name = Path(constraints).name
    assert "r'torch|torchvision|torchaudio|triton|nvidia-[a-z0-9-]+'" in runs and f"open('{name}', 'w')" in runs
    assert "/opt/autotrain" in values(dockerfile, "WORKDIR") and constraints == f"/opt/autotrain/{name}"
    assert f"grep -i '^torch==' {name}" in runs, "a base without torch must fail the build"


def test_a_compiler_tini_and_the_entrypoint_script_come_in(dockerfile):
    runs = " ".join(values(dockerfile, "RUN"))
    assert re.search(r"apt-get install [^&]*\btini\b", runs)
    assert '[ "$COMPILER" = 1 ] && echo gcc g++' in runs  # torch.compile builds C (inductor, Triton)
    assert "install -m 0755 docker/entrypoint.sh /usr/local/bin/autotrain-entrypoint" in runs
    assert exec_form(values(dockerfile, "ENTRYPOINT")[-1]) == ["tini", "--", "autotrain-entrypoint"]
    assert exec_form(values(dockerfile, "CMD")[-1]) == ["--help"]
    assert values(dockerfile, "EXPOSE") == ["7860"] and values(dockerfile, "STOPSIGNAL") == ["SIGTERM"]
    assert env_of(dockerfile)["AUTOTRAIN_CONTAINER"] == "docker"  # the app listens for the host


def test_the_entrypoint_script_ends_in_the_cli():
    (script,) = metadata.entry_points(group="console_scripts", name="autotrain")
    assert script.value == "autotrain.cli.main:main"
    lines = (ROOT / "docker" / "entrypoint.sh").read_text().splitlines()
    assert lines[0] == "#!/bin/sh" and lines[-1] == 'exec autotrain "$@"'


def entrypoint(tmp_path, args, env, python_exit=1):
    """Run docker/entrypoint.sh with stand-ins for `autotrain` (prints its arguments and environment) and
    `python` (answers the script's "is torch a CUDA build?" with `python_exit`)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "autotrain").write_text('#!/bin/sh\necho "args: $*"; env\n')
    (bin_dir / "python").write_text(f"#!/bin/sh\nexit {python_exit}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    done = subprocess.run(
        ["sh", str(ROOT / "docker" / "entrypoint.sh"), *args],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env}, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    variables = dict(line.split("=", 1) for line in done.stdout.splitlines()[1:] if "=" in line)
    return done.stdout.splitlines()[0], variables, done.stderr


def test_the_entrypoint_gives_a_user_without_a_home_writable_caches(tmp_path):
    """`docker run --user UID:GID` with a uid the image does not know leaves HOME=/: matplotlib, Triton and
    inductor then warn or fail on their caches. The entrypoint gives that user a home and the caches in it."""
    hf = str(tmp_path / "hf")
    args, env, stderr = entrypoint(tmp_path, ["llm", "--config", "x.yml"], {"HOME": "/", "HF_HOME": hf})
    assert args == "args: llm --config x.yml"
    home = env["HOME"]
    assert home == f"/tmp/home-{os.getuid()}" and os.access(home, os.W_OK)
    for name in ("MPLCONFIGDIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        assert env[name].startswith(home + "/"), name
    assert env["HF_HOME"] == hf and stderr == ""
    # A home that is writable is kept, and so are caches the user set.
    args, env, _ = entrypoint(tmp_path, ["--help"], {"HOME": str(tmp_path), "MPLCONFIGDIR": "/mine"})
    assert env["HOME"] == str(tmp_path) and env["MPLCONFIGDIR"] == "/mine"


def test_the_entrypoint_says_when_a_cuda_image_sees_no_gpu(tmp_path):
    if any(name.startswith("nvidia") and name[6:].isdigit() for name in os.listdir("/dev")):
        pytest.skip("this machine has /dev/nvidia*: the container would see a GPU")
    home = {"HOME": str(tmp_path)}
    _, _, stderr = entrypoint(tmp_path, ["llm", "--config", "x.yml"], home, python_exit=0)
    assert "note: this container sees no GPU: start it with `docker run --gpus all ...`" in stderr
    for quiet in (["--help"], ["validate", "x.yml"]):  # commands that do not train say nothing
        assert entrypoint(tmp_path, quiet, home, python_exit=0)[2] == ""
    assert entrypoint(tmp_path, ["llm", "--config", "x.yml"], home, python_exit=1)[2] == ""  # a CPU build


def test_runs_as_a_non_root_user(dockerfile):
    users = values(dockerfile, "USER")
    assert users and users[-1].split(":")[0] not in ("root", "0")
    last_user = max(i for i, (kw, _) in enumerate(dockerfile) if kw == "USER")
    assert all(kw != "RUN" for kw, _ in dockerfile[last_user:]), "a RUN after USER would need root"
    assert f"useradd --create-home --uid 1000 --shell /bin/bash {users[-1]}" in " ".join(values(dockerfile, "RUN"))


def test_hf_home_is_for_a_named_volume_and_the_image_leaves_none(dockerfile):
    """A VOLUME would give each container an anonymous volume that outlives it (`--rm` aside): the documented
    commands mount a named one at HF_HOME instead, made writable for any uid (a fresh volume takes the mode)."""
    env = env_of(dockerfile)
    assert values(dockerfile, "VOLUME") == []
    runs = " ".join(values(dockerfile, "RUN"))
    assert env["HF_HOME"] == "/cache/huggingface" and 'chmod 1777 "$HF_HOME"' in runs
    assert "/workspace" in values(dockerfile, "WORKDIR")


def test_the_apt_layer_keeps_no_lists_or_caches(dockerfile):
    """Not every base has Docker's clean-up hook (Debian's debootstrap has none): the RUN that installs with
    apt removes, in the same layer, its lists, the downloaded packages and its binary caches (~130 MB)."""
    (apt,) = [args for args in values(dockerfile, "RUN") if "apt-get install" in args]
    steps = [step.strip() for step in apt.split("&&")]
    assert steps[0] == "apt-get update -qq" and "apt-get clean" in steps
    assert "rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb" in steps


def test_the_image_says_it_is_the_image(dockerfile):
    """autotrain's hints name the build arguments in the image, told by a variable the Dockerfile sets."""
    from autotrain import hints

    assert env_of(dockerfile)[hints.IMAGE] == "1"
    args = {key for value in values(dockerfile, "ARG") for key in key_values(value)}
    assert {"EXTRA_PACKAGES", "COMPILER"} <= args  # what hints.REBUILD and compiler_hint name
    runs = " ".join(values(dockerfile, "RUN"))
    assert 'if [ -n "$EXTRA_PACKAGES" ]; then pip install --quiet $EXTRA_PACKAGES; fi' in runs


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
    # the entrypoint; the quick starts' tiny model and data; the GPU checks, run inside the image
    for path in ["docker/entrypoint.sh", "tests/assets/tiny-llama/config.json", "benchmarks/gpu_checks.py"]:
        assert not ignored(patterns, path), f"{path} belongs in the image"


APP = (
    "docker run --rm --gpus all --stop-timeout 300 -p 7860:7860 -e AUTOTRAIN_APP_URL=http://localhost:7860 "
    '-v "$PWD":/workspace -v autotrain-hf:/cache/huggingface autotrain app'
)
CACHE = "-v autotrain-hf:/cache/huggingface"


def test_docs_show_build_and_run():
    docs = (ROOT / "README.md").read_text()
    assert "docker build -t autotrain ." in docs
    run = next(line for line in docs.splitlines() if line.startswith("docker run --rm --gpus all"))
    assert '-v "$PWD":/workspace' in run and "autotrain llm --config" in docs
    assert "--stop-timeout" in run  # docker's 10 s before SIGKILL is short for saving a large checkpoint
    # the address to open; --stop-timeout: the app stops its runs, each saving a checkpoint, and waits (240 s)
    assert APP in docs.splitlines()


def documented_docker_runs() -> list[tuple[str, str]]:
    """(file, command) of every `docker run` of the image in the README, docs/ and the Dockerfile's comments:
    code lines, inline code and comment lines joined at `\\`. Fragments that name no image (`docker run -p
    N:7860`) are left out."""
    found = []
    texts = {path.name: path.read_text() for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    comments = [line.lstrip("# ") for line in (ROOT / "Dockerfile").read_text().splitlines() if line.startswith("#")]
    texts["Dockerfile"] = "\n".join(comments).replace("\\\n", " ")
    for name, text in texts.items():
        commands = re.findall(r"`(docker run [^`]*)`", text)
        commands += [line.strip() for line in text.splitlines() if line.strip().startswith("docker run ")]
        found += [(name, re.sub(r"\s+", " ", c)) for c in commands if re.search(r" autotrain( |$)", c)]
    return found


def test_every_documented_docker_run_removes_its_container_and_names_its_volume():
    """`--rm`, so attempts do not pile up in `docker ps -a`; a command that trains or starts the app mounts
    the named cache volume (the image declares none, so nothing anonymous is left either)."""
    commands = documented_docker_runs()
    assert {name for name, _ in commands} >= {"README.md", "distributed.md", "docker.md", "Dockerfile"}
    for name, command in commands:
        assert " --rm " in command, f"{name}: {command}"
        image_args = re.split(r" autotrain( |$)", command, maxsplit=1)[-1]
        if re.search(r"(^| )(llm|app|--config)( |$)", image_args):
            assert CACHE in command, f"{name}: {command}"
        assert re.findall(r"-v (\S+):/cache/huggingface", command) in ([], ["autotrain-hf"]), f"{name}: {command}"
    assert {name for name, command in commands if command == APP} >= {"README.md", "distributed.md", "docker.md"}


def test_the_docs_say_how_to_add_packages():
    """The container cannot install into the environment (root's): the docs say so and name the build
    argument; no sentence promises that a user's `pip install` is kept to the base's torch."""
    docker = (ROOT / "docs" / "docker.md").read_text()
    assert "## Adding packages" in docker
    assert 'docker build --build-arg EXTRA_PACKAGES="wandb deepspeed" -t autotrain .' in docker
    for path in [
        ROOT / "README.md",
        ROOT / "docs" / "docker.md",
        ROOT / "docs" / "distributed.md",
        ROOT / "Dockerfile",
    ]:
        text = re.sub(r"\s+", " ", path.read_text())
        assert "a user's" not in text and "the user's included" not in text, path.name
        assert 'EXTRA_PACKAGES="' in text, path.name
