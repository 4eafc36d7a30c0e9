"""What defines a run, recorded in run.json, so that `--resume` knows what it resumes (no torch).

A run is defined by its base model (name, revision, and for a local folder its files), its data (the files'
contents), and every setting of its config that changes what is trained: task, trainer, hyper-parameters,
precision, the number of processes. Settings that only say where and how often things are written or shown
(logging, saving, evaluating, the hub, exports, the cluster, the rendezvous address) are left out.

`--resume` compares the config with the run's record and lists every difference. The length of the schedule
(`max_steps`, `epochs`) may change (that is how a run is made longer); anything else is refused unless the
command says the changes are meant (`--accept-changes`): they then apply from the resumed step and run.json
records them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotrain.config.load import LoadedConfig

# Settings that do not change what is trained (a dotted key, or the start of one).
NOT_DEFINING = (
    "project_name",
    "log",
    "hub",
    "cluster",
    "export",
    "distributed.main_process_ip",
    "distributed.main_process_port",
    "distributed.machine_rank",
    "distributed.ray_address",
    "distributed.rendezvous_timeout",
    "distributed.backend",
    "data.path",  # the files' contents are compared instead
    "training_args.logging_steps",
    "training_args.save_steps",
    "training_args.save_total_limit",
    "training_args.eval_strategy",
    "training_args.eval_steps",
    "training_args.eval_batch_size",
    "training_args.dataloader_num_workers",
    "training_args.cross_entropy",  # the same loss and gradients, computed another way
)
# The schedule's length: a resume may change it without saying so (it is listed).
LENGTH = ("training_args.max_steps", "training_args.epochs")
SAMPLE = 1 << 20  # bytes read from each end of a local base model's weight file


@dataclass(frozen=True)
class Difference:
    key: str
    old: Any
    new: Any

    def line(self) -> str:
        return f"{self.key}: {_shown(self.old)} -> {_shown(self.new)}"

    def record(self) -> dict:
        return {"key": self.key, "old": self.old, "new": self.new}


def _shown(value: Any) -> str:
    text = "(not set)" if value is None else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def fingerprint(loaded: LoadedConfig) -> dict:
    """{"base_model", "settings", "defaulted"} of the config (the data's fingerprint is run.json's `data`);
    `defaulted`: the settings the config leaves at their default."""
    found = settings(loaded.redacted())
    left = defaulted(loaded.config)
    return {
        "base_model": base_model_record(loaded.config),
        "settings": found,
        "defaulted": sorted(k for k in found if any(k == d or k.startswith(d + ".") for d in left)),
    }


def defaulted(model: Any, prefix: str = "") -> set[str]:
    """Dotted names of the fields of a validated config that it does not set (their default applies)."""
    from pydantic import BaseModel

    out: set[str] = set()
    for name in type(model).model_fields:
        value = getattr(model, name)
        if name not in model.model_fields_set:
            out.add(prefix + name)
        elif isinstance(value, BaseModel):
            out |= defaulted(value, f"{prefix}{name}.")
    return out


def settings(config: dict, prefix: str = "") -> dict[str, Any]:
    """The config's defining settings, flattened to dotted keys."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if any(dotted == skip or dotted.startswith(skip + ".") for skip in NOT_DEFINING):
            continue
        if isinstance(value, dict) and value:
            out.update(settings(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def base_model_record(cfg) -> dict:
    """The base model's name and revision; for a local folder, each weight and config file's size and a hash
    of its first and last MiB (cheap at any size, and a file replaced by another almost never matches)."""
    record: dict[str, Any] = {"name": cfg.base_model, "revision": cfg.revision}
    folder = Path(cfg.base_model).expanduser()
    if folder.is_dir():
        files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".safetensors", ".bin", ".json"))
        record["files"] = {p.name: _sampled(p) for p in files[:64]}
    return record


def _sampled(path: Path) -> dict:
    digest = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as handle:
        digest.update(handle.read(SAMPLE))
        if size > SAMPLE:
            handle.seek(max(SAMPLE, size - SAMPLE))
            digest.update(handle.read(SAMPLE))
    return {"bytes": size, "sampled_sha256": digest.hexdigest()}


def differences(recorded: dict, recorded_data: dict | None, now: dict, data_now: dict | None) -> list[Difference]:
    """Every difference between the run's record and the config now, settings first."""
    old, new = recorded.get("settings", {}), now.get("settings", {})
    # A setting the record lacks (autotrain gained it after the run was recorded) and the config leaves at its
    # default is the run's own behaviour, not a change.
    added = {k for k in now.get("defaulted", ()) if k not in old}
    keys = sorted({*old, *new} - added)
    found = [Difference(k, old.get(k), new.get(k)) for k in keys if old.get(k) != new.get(k)]
    found += _model_differences(recorded.get("base_model") or {}, now.get("base_model") or {})
    if recorded_data is not None and data_now is not None and _contents(recorded_data) != _contents(data_now):
        found.append(Difference("data", _data_summary(recorded_data), _data_summary(data_now)))
    return found


def _model_differences(old: dict, new: dict) -> list[Difference]:
    found = [
        Difference(f"base_model.{k}", old.get(k), new.get(k)) for k in ("name", "revision") if old.get(k) != new.get(k)
    ]
    if not found and old.get("files") != new.get("files"):
        changed = sorted(
            n
            for n in {*old.get("files", {}), *new.get("files", {})}
            if old.get("files", {}).get(n) != new.get("files", {}).get(n)
        )
        found.append(Difference("base_model.files", "as recorded", "changed: " + ", ".join(changed[:5])))
    return found


def _contents(data: dict) -> list:
    """What the data files hold, whatever their paths: their hashes (or the hub dataset's name); of each source."""
    if "sources" in data:
        return [_contents(source) for source in data["sources"]]
    if "hub" in data:
        return ["hub", data["hub"]]
    return sorted(v["sha256"] for v in data.values() if isinstance(v, dict) and "sha256" in v)


def _data_summary(data: dict) -> str:
    if "sources" in data:
        return "; ".join(_data_summary(source) for source in data["sources"])
    if "hub" in data:
        return f"hub dataset {data['hub']}"
    files = [(k, v) for k, v in data.items() if isinstance(v, dict) and "sha256" in v]
    return ", ".join(f"{os.path.basename(k)} (sha256 {v['sha256'][:12]})" for k, v in files[:3]) + (
        f" and {len(files) - 3} more" if len(files) > 3 else ""
    )


DATA_SUFFIXES = {".jsonl", ".json", ".csv", ".parquet", ".arrow", ".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"}
MAX_FILES = 64
MAX_ENTRIES = 10_000


def data_files(path: Path) -> tuple[list[Path], bool]:
    """The data files under `path` worth fingerprinting, and whether the list was cut short.

    Only files a dataset is made of (by suffix), at most MAX_FILES, looking at no more than MAX_ENTRIES
    entries and never following links out of the folder: a misnamed `data.path` costs nothing.
    """
    if path.is_file():
        return ([path] if path.suffix.lower() in DATA_SUFFIXES else []), False
    found: list[Path] = []
    seen = 0
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            seen += 1
            if Path(name).suffix.lower() in DATA_SUFFIXES:
                found.append(Path(root) / name)
            if len(found) >= MAX_FILES or seen >= MAX_ENTRIES:
                return found, True
        seen += len(dirs)
    return found, False


def data_fingerprint(cfg) -> dict:
    """The config's data: its local files' sizes and SHA-256 (see `data_files` for which), or the hub name."""
    prints = []
    for _, value in cfg.data.paths():
        path = Path(value).expanduser()
        prints.append(files_fingerprint(path) if path.exists() else {"hub": value})
    return prints[0] if len(prints) == 1 else {"sources": prints}  # several `data.sources`: each, in order


def files_fingerprint(path: Path) -> dict:
    """Size and SHA-256 of a local dataset's files (see `data_files` for which)."""
    files, truncated = data_files(path)
    out = {}
    for file in files:
        digest = hashlib.sha256()
        with open(file, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        out[str(file)] = {"bytes": file.stat().st_size, "sha256": digest.hexdigest()}
    if truncated:
        out["..."] = f"only the first {len(files)} data files are listed"
    return out


def is_length(difference: Difference) -> bool:
    return difference.key in LENGTH
