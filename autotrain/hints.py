"""What to do about a missing package or a folder that cannot be used, said for where autotrain runs.

On a machine of one's own a missing package is a `pip install` away. In the Docker image (its Dockerfile
sets AUTOTRAIN_IMAGE=1) the environment belongs to root and a container's changes end with it: a package
comes in when the image is built (`--build-arg EXTRA_PACKAGES=...`), a host folder through `-v`, and
files are written as the container's uid (`--user`). Every hint autotrain prints about these comes from
here. Imports nothing from autotrain, so every layer may use it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

IMAGE = "AUTOTRAIN_IMAGE"  # set to 1 by the Dockerfile
WORKSPACE = Path("/workspace")  # the image's WORKDIR, where `-v "$PWD":/workspace` mounts the user's folder
REBUILD = "build the image again with {what}: docker build --build-arg {arg} -t autotrain ."
MOUNT = 'start the container in the folder that holds your configs and data, with -v "$PWD":/workspace'
AS_YOU = 'start the container as yourself: docker run --user "$(id -u):$(id -g)" ...'


def in_image() -> bool:
    """Running in autotrain's Docker image (said by the image itself, not guessed from cgroups)."""
    return os.environ.get(IMAGE) == "1"


def install_hint(packages: str = "", *, extra: str | None = None) -> str:
    """How to get `packages` (pip's arguments: `wandb`, `flash-attn --no-build-isolation`) or autotrain's
    optional `extra`: a pip command, or in the image the build argument that installs them."""
    if not in_image():
        return f"pip install {packages}" if packages else f"pip install 'autotrain[{extra}]'"
    if extra:
        packages = " ".join(extra_requirements(extra)) or f"<the packages of the {extra} extra in pyproject.toml>"
    return REBUILD.format(what="it", arg=f'EXTRA_PACKAGES="{packages}"')


def extra_requirements(extra: str) -> list[str]:
    """The requirements of autotrain's optional `extra`, as its installed metadata lists them (an extra that
    names others of autotrain's, such as `tasks`, gives theirs)."""
    from importlib import metadata

    try:
        requires = metadata.requires("autotrain") or []
    except metadata.PackageNotFoundError:
        return []
    found = []
    for line in requires:
        requirement, _, marker = line.partition(";")
        if not re.search(rf"""\bextra\s*==\s*["']{re.escape(extra)}["']""", marker):
            continue
        requirement = requirement.strip()
        nested = re.fullmatch(r"autotrain\[(.*)\]", requirement.replace(" ", ""))
        if nested:
            found += [r for name in nested.group(1).split(",") for r in extra_requirements(name)]
        else:
            found.append(requirement)
    return list(dict.fromkeys(found))


def compiler_hint() -> str:
    """How to get a C/C++ compiler: the system's package, or in the image its COMPILER build argument."""
    if in_image():
        return REBUILD.format(what="one", arg="COMPILER=1")
    return "install one (apt-get install build-essential)"


def cannot_write_hint(path: str | Path, otherwise: str) -> str:
    """What to do about a folder this process may not write to: `otherwise` (another place), or in the image,
    where the mounted folder belongs to another uid than the container's, to start the container as that uid."""
    if not in_image():
        return otherwise
    owner = _owner(Path(path))
    if owner is None or owner == os.getuid():
        return otherwise
    return f"the container runs as uid {os.getuid()} and the folder belongs to uid {owner}: {AS_YOU}"


def missing_path_hint(path: str | Path) -> str | None:
    """In the image, a path that does not exist while nothing is mounted at /workspace (or it is empty): the
    user's folder was not mounted. None elsewhere, or where the workspace holds something."""
    if not in_image() or Path(path).exists():
        return None
    if not WORKSPACE.is_dir():
        return None
    if not _mounted(WORKSPACE):
        return f"nothing is mounted at {WORKSPACE}: {MOUNT}"
    if not any(WORKSPACE.iterdir()):
        return f"{WORKSPACE}, the folder mounted there, is empty: {MOUNT}"
    return None


def _owner(path: Path) -> int | None:
    """The uid owning `path`, or its nearest existing parent."""
    for candidate in (path, *path.absolute().parents):
        try:
            return candidate.stat().st_uid
        except OSError:
            continue
    return None


def _mounted(folder: Path) -> bool:
    """A mount point at `folder` (a bind mount of the host's folder is one), by the mount table."""
    try:
        table = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return os.path.ismount(folder)
    # mountinfo's fifth field is the mount point, with spaces and the like written as octal escapes
    points = {line.split()[4].encode().decode("unicode_escape") for line in table.splitlines() if line.count(" ") >= 4}
    return str(folder) in points
