"""Every path a request names is confined to one folder: no absolute paths, no `..`, no symlinks out."""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath, PureWindowsPath

# A run is a folder directly inside the runs dir; its name is one plain path segment.
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
CONFIG_SUFFIXES = (".yml", ".yaml")


MAX_NAME = 128  # characters in one part of a path (file systems stop at 255 bytes)
MAX_PARTS = 16  # parts of a path inside the runs dir (file systems stop a whole path at 4096 bytes)


class PathRejected(ValueError):
    """A path from a request that would leave its folder, or is not a valid name."""


class PathTaken(ValueError):
    """A path that is valid but already taken by something autotrain must not overwrite (answered 409)."""


def confine(root: Path, relative: str) -> Path:
    """`root/relative` resolved, refused when it is absolute, climbs with `..` or resolves outside `root`."""
    if not isinstance(relative, str):
        raise PathRejected(f"a path must be a string, not {type(relative).__name__}")
    if not relative or "\x00" in relative:
        raise PathRejected("empty path")
    parts = [part for part in relative.replace("\\", "/").split("/") if part]
    long = next((part for part in parts if len(part) > MAX_NAME), None)
    if long is not None:
        raise PathRejected(f"`{long[:40]}...` is {len(long)} characters long; a name has at most {MAX_NAME}")
    if len(parts) > MAX_PARTS:
        raise PathRejected(
            f"`{relative[:40]}...` has {len(parts)} parts; a path in the runs dir has at most {MAX_PARTS}"
        )
    posix, windows = PurePosixPath(relative), PureWindowsPath(relative)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or relative.startswith(("/", "\\")):
        raise PathRejected(f"`{relative}`: absolute paths are not allowed; give a path inside the runs dir")
    if ".." in posix.parts or ".." in windows.parts:
        raise PathRejected(f"`{relative}`: `..` is not allowed")
    base = root.resolve()
    try:
        target = (base / posix).resolve()  # follows symlinks: one pointing outside is caught below
    except OSError as exc:  # a link loop, a name the file system refuses
        raise PathRejected(f"`{relative[:80]}`: {exc.strerror or exc}") from None
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


def config_to_save(root: Path, relative: str, is_run) -> Path:
    """Where a config named `relative` may be saved: inside `root`, not under a file, not onto a folder,
    and never inside a run's folder (its `autotrain.yaml` records what the run trained: predict, evaluate
    and chat read it). `is_run(folder)` says whether a folder holds a run."""
    file = config_file(root, relative)
    base = root.resolve()
    for folder in reversed(file.parents):
        if not folder.is_relative_to(base) or folder == base:
            continue
        shown = folder.relative_to(base).as_posix()
        if folder.exists() and not folder.is_dir():
            raise PathTaken(f"`{shown}` is a file: a config cannot be saved under it")
        if folder.is_dir() and is_run(folder):
            raise PathTaken(f"`{shown}` is a run's folder: its files are the run's; save the config elsewhere")
    if file.is_dir():
        raise PathTaken(f"`{relative}` is a folder: give a file name (NAME.yml)")
    return file
