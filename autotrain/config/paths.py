"""Checks on the paths a config names: where a run may write, what may be read as data, and what can only be
a path on this machine.

`project_name` is a folder that `--overwrite` may empty, so it must be a folder of its own: never the
folder a command runs from, the folder holding the config, a parent of either, the home folder, the
filesystem root or a system folder. These are config mistakes (exit 2 with the line), found by
`validate` as well as by a run.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Top-level folders of a Linux/macOS system that hold no one's runs.
SYSTEM_FOLDERS = {
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/Users",
    "/System",
    "/Library",
    "/Applications",
}

Issue = tuple[tuple, str]
# The file autotrain writes into every folder it runs in; `--overwrite` empties only folders holding it.
RUN_MARKER = ".autotrain-run"
# `name` or `owner/name`: what a hub repository id looks like (a local path has other characters or exists).
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
# What names a local file however it is spelt: a data file's or a GGUF file's extension.
_FILE_SUFFIXES = (".gguf", ".json", ".jsonl", ".csv", ".parquet", ".txt")


def hub_id(value: str | None) -> str | None:
    """`value` when it names a hub repository rather than a local file or folder, else None."""
    if not value or not _REPO_ID.fullmatch(value) or Path(value).expanduser().exists():
        return None
    if value.endswith(_FILE_SUFFIXES):
        return None  # a local file that is not there
    return value


def missing_local_paths(config: Any) -> Iterator[Issue]:
    """`base_model` / `data.path` (or each `data.sources` path) values that only a path on this machine can be
    (`./x`, `a/b/c`, `x.jsonl`) and that are not here. The run's preflight says each as one line (`data.path`
    and the message); `validate` says the same message at the value's line. Not part of `load_config`: a
    saved run's config is read back elsewhere, and `autotrain launch` sends a config to machines whose files
    these are."""
    data = getattr(config, "data", None)
    sources = data.paths() if hasattr(data, "paths") else []  # each source of a mixture has its own path
    given = [(("base_model",), config.base_model)]
    given += [(tuple(int(p) if p.isdigit() else p for p in field.split(".")), value) for field, value in sources]
    for path, value in given:
        if not value or "\x00" in value or hub_id(value) is not None or Path(value).expanduser().exists():
            continue
        where = (
            ""
            if value.startswith(("/", "~"))
            else f" (a relative path starts from the folder you run from, {Path.cwd()})"
        )
        yield path, f"`{value}` does not exist on this machine{where}, and it cannot be a hub id"


def text_problems(data: Any, path: tuple = ()) -> Iterator[Issue]:
    """Strings holding a NUL byte (they would be cut short by the operating system)."""
    stack = [(data, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, where + (k,)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, where + (i,)) for i, v in enumerate(node))
        elif isinstance(node, str) and "\x00" in node:
            yield where, "holds a NUL character (\\0); remove it"


def _resolve(path: str) -> Path:
    return Path(os.path.abspath(os.path.expanduser(path)))


def _own_saved_config(folder: Path, config_source: str) -> bool:
    """The `autotrain.yaml` a run saved in its own folder: resuming from it names that very folder."""
    saved = _resolve(config_source)
    return saved.name == "autotrain.yaml" and saved.parent == folder and (folder / RUN_MARKER).is_file()


def why_not_a_run_folder(project: str, config_source: str | None = None) -> str | None:
    """Why `project` may not be a run's folder, or None when it may."""
    if not project.strip():
        return "is empty; name a folder for this run, e.g. `runs/my-model`"
    if "\x00" in project:
        return None  # reported as a NUL character already
    folder = _resolve(project)
    cwd = Path.cwd().resolve()
    config_dir = _resolve(config_source).parent if config_source and not config_source.startswith("<") else None
    try:
        folder_real = folder.resolve()
    except (OSError, RuntimeError):
        folder_real = folder
    if folder_real == Path(folder_real.anchor):
        return "is the root of the filesystem"
    if folder_real == Path.home().resolve():
        return "is your home folder"
    if str(folder_real) in SYSTEM_FOLDERS or str(folder) in SYSTEM_FOLDERS:
        return f"is the system folder `{folder_real}`"
    if cwd == folder_real or cwd.is_relative_to(folder_real):
        return "is the folder you run from" + ("" if cwd == folder_real else " or a parent of it")
    if config_dir is not None and not _own_saved_config(folder_real, config_source):
        config_real = config_dir.resolve()
        if config_real == folder_real or config_real.is_relative_to(folder_real):
            return "is the folder holding the config" + ("" if config_real == folder_real else " or a parent of it")
    return None


def check_paths(config: Any, source: str | None) -> Iterator[Issue]:
    """Problems with `project_name` and `data.path` of a validated config."""
    reason = why_not_a_run_folder(config.project_name, source)
    if reason is not None:
        yield (
            ("project_name",),
            f"`{config.project_name}` {reason}; a run needs a folder of its own (e.g. `runs/my-model`), "
            "which --overwrite may empty",
        )
    data = getattr(config, "data", None)
    for field, data_path in data.paths() if hasattr(data, "paths") else ():
        if isinstance(data_path, str) and data_path.startswith(("/", "~")) and "\x00" not in data_path:
            resolved = _resolve(data_path)
            if resolved == Path(resolved.anchor) or str(resolved) in SYSTEM_FOLDERS or resolved == Path.home():
                yield (
                    tuple(int(part) if part.isdigit() else part for part in field.split(".")),
                    f"`{data_path}` is a system or home folder, not a dataset; name the data's file or folder",
                )
