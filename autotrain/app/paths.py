"""Every path a request names is confined to one folder: no absolute paths, no `..`, no symlinks out."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath, PureWindowsPath

# A run is a folder directly inside the runs dir; its name is one plain path segment.
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CONFIG_SUFFIXES = (".yml", ".yaml")


class PathRejected(ValueError):
    """A path from a request that would leave its folder, or is not a valid name."""


def confine(root: Path, relative: str) -> Path:
    """`root/relative` resolved, refused when it is absolute, climbs with `..` or resolves outside `root`."""
    if not relative or "\x00" in relative:
        raise PathRejected("empty path")
    posix, windows = PurePosixPath(relative), PureWindowsPath(relative)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or relative.startswith(("/", "\\")):
        raise PathRejected(f"`{relative}`: absolute paths are not allowed; give a path inside the runs dir")
    if ".." in posix.parts or ".." in windows.parts:
        raise PathRejected(f"`{relative}`: `..` is not allowed")
    base = root.resolve()
    target = (base / posix).resolve()  # follows symlinks: one pointing outside is caught below
    if not target.is_relative_to(base):
        raise PathRejected(f"`{relative}` leads outside the runs dir")
    return target


def run_folder(root: Path, name: str) -> Path:
    """The folder of run `name`, a direct child of `root`."""
    if not RUN_NAME.match(name or ""):
        raise PathRejected(f"`{name}` is not a run name (letters, digits, `.`, `_`, `-`)")
    folder = confine(root, name)
    if folder.parent != root.resolve():
        raise PathRejected(f"run `{name}` is a link to another folder")
    return folder


def config_file(root: Path, relative: str) -> Path:
    """A YAML config path inside `root`."""
    path = confine(root, relative)
    if path.suffix not in CONFIG_SUFFIXES:
        raise PathRejected(f"`{relative}`: a config file ends in .yml or .yaml")
    return path


def project_folder(root: Path, workdir: Path, project_name: str) -> Path:
    """Where a config's `project_name` lands (relative to the working dir, as the CLI reads it).

    The app watches only runs directly inside its runs dir, so any other place is refused.
    """
    folder = (workdir / project_name).resolve()
    base = root.resolve()
    if folder.parent != base or not RUN_NAME.match(folder.name):
        shown = root / "NAME"
        raise PathRejected(
            f"project_name `{project_name}` must be a folder directly inside the runs dir `{root}` (e.g. `{shown}`)"
        )
    return folder
