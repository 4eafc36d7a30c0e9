"""The runtime's own resident memory on this machine: what a training process holds before its model's
tensors exist. A CPU run's resident peak is this plus its tensors, so the memory estimate counts it on the
CPU; on a GPU the estimate is of device memory only and none of this is measured.

Two parts, both measured:

- The environment (`runtime_baseline`): a fresh interpreter (`python -m autotrain.run.runtime`) does what
  every run does before its model: it imports the command line's libraries, autotrain's training code,
  torch, transformers, TRL's trainers, PEFT, datasets and accelerate (their code, mapped from files, and the
  heap their imports fill), sets malloc as a CPU run sets it (autotrain.training.allocator), puts 64 rows of
  5000 characters through datasets as a run's data goes the first time (reader, cache writer, the raw-text
  trainer's tokenizing and blocking `map`s), and builds a small Llama without weights (the model-building
  code); then it reports its resident memory (`VmRSS`: anonymous and file-backed pages). This depends on
  the machine (page size, which library pages the page cache holds), the Python environment and malloc's
  mode, and on nothing of the config: it is measured once and cached under a hash of those
  (`~/.cache/autotrain/runtime/`, or under `$XDG_CACHE_HOME`).
- The tokenizer (`tokenizer_bytes`): loaded here, in this process, a second time (the first imports its
  code), its growth of resident memory read with the heap's free pages given back before and after, so
  that what it keeps counts and what loading took for a while does not. A tokenizer that is not on this
  machine is not counted, and the estimate says so. A local tokenizer's figure is cached beside the
  baseline, under a hash of its files' names, sizes and modification times and the environment's key (its
  two loads took 0.7 s of each run's start with SmolLM2's GGUF); a hub id's is measured in each run.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "tokenizers", "autotrain")
PROBE_TIMEOUT_S = 300
PROBE_VERSION = 5  # raised when what the probe does changes: older measurements are not reused


def runtime_baseline() -> dict[str, Any]:
    """{"bytes": resident bytes of the environment before a model, "measured": when, "cached": bool}, or
    {"unavailable": why}. Measured by the probe the first time for this machine and environment."""
    from autotrain.training.allocator import mode

    settings = {"malloc": mode()}
    path = _cache_dir() / f"{_key(settings)}.json"
    try:
        return {**json.loads(path.read_text(encoding="utf-8")), "cached": True}
    except (OSError, ValueError):
        pass
    found = _probe(settings)
    if "bytes" in found:
        _store(path, found)
    return {**found, "cached": False}


_TOKENIZERS: dict[tuple, int | None] = {}  # measured in this process, by source: the choice and the record agree


def tokenizer_bytes(cfg, token: str | None = None) -> int | None:
    """What loading the config's tokenizer adds to this process's resident memory; None when it cannot be
    loaded from this machine (a hub model not downloaded yet) or the task has none."""
    gguf = getattr(cfg, "gguf", None)
    source = str(gguf[0]) if gguf is not None else cfg.base_model
    kwargs: dict[str, Any] = {"revision": cfg.revision, "token": token, "trust_remote_code": cfg.trust_remote_code}
    if gguf is not None:
        kwargs["gguf_file"] = str(gguf[1])
    key = (source, cfg.revision, kwargs.get("gguf_file"), cfg.trust_remote_code)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = _stored_tokenizer(source, kwargs, key)
    return _TOKENIZERS[key]


def _stored_tokenizer(source: str, kwargs: dict[str, Any], key: tuple) -> int | None:
    """``_measure_tokenizer``'s figure for a tokenizer on this machine's disk, measured once per its files (names,
    sizes, modification times) and environment and kept beside the baseline; a hub id's, each time."""
    files = _local_files(source, kwargs.get("gguf_file"))
    if files is None:
        return _measure_tokenizer(source, kwargs)
    from autotrain.training.allocator import mode

    what = {"malloc": mode(), "tokenizer": [str(Path(source).resolve()), *key[1:], files]}
    path = _cache_dir() / f"tokenizer-{_key(what)}.json"
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    grown = _measure_tokenizer(source, kwargs)
    if grown is not None:
        _store(path, {"bytes": grown})
    return grown


def _local_files(source: str, gguf_file: str | None) -> list[list] | None:
    """[name, size, mtime_ns] of the files a local tokenizer is read from (the folder's, or its GGUF file);
    None for a hub id or a file that cannot be read."""
    folder = Path(source)
    if not folder.is_dir():
        return None
    try:
        paths = [folder / gguf_file] if gguf_file else sorted(p for p in folder.iterdir() if p.is_file())
        return [[p.name, stat.st_size, stat.st_mtime_ns] for p in paths for stat in (p.stat(),)]
    except OSError:
        return None


def _measure_tokenizer(source: str, kwargs: dict[str, Any]) -> int | None:
    from autotrain.training.allocator import trim
    from autotrain.training.memory import current_anon

    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    try:  # a first load imports the tokenizer's code, which the probe's figure holds already
        AutoTokenizer.from_pretrained(source, local_files_only=True, **kwargs)
    except Exception:  # noqa: BLE001 - no tokenizer here (an image model, a hub model not downloaded)
        return None
    gc.collect()
    trim()
    before = current_anon()
    loaded = AutoTokenizer.from_pretrained(source, local_files_only=True, **kwargs)
    gc.collect()
    trim()  # what loading took for a while and gave back does not count: what the tokenizer keeps does
    grown = max(0, current_anon() - before)
    del loaded
    return grown


def _key(settings: dict[str, Any]) -> str:
    """What the figure depends on: this machine, this environment, malloc's mode."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    identity = [platform.node(), platform.machine(), os.sysconf("SC_PAGE_SIZE"), sys.executable, sys.version]
    text = json.dumps([PROBE_VERSION, identity, versions, settings], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autotrain" / "runtime"


def _store(path: Path, found: dict[str, Any]) -> None:
    """Written whole or not at all (a reader never sees half a file); a cache that cannot be written is
    measured again next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(json.dumps(found), encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        pass


def _probe(settings: dict[str, Any]) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "autotrain.run.runtime", json.dumps(settings)],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"unavailable": f"the probe did not finish ({type(exc).__name__})"}
    lines = done.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"unavailable": f"the probe failed: {last[:200]}"}


def _resident() -> int:
    from autotrain.training.memory import proc_status

    return proc_status().get("VmRSS", 0)


def probe(settings: dict[str, Any]) -> dict[str, Any]:
    """In the probe's own fresh interpreter: import what a run imports, set malloc, put a few rows through
    datasets and build a model class without weights, as a run does before training."""
    import time

    import accelerate  # noqa: F401
    import datasets  # noqa: F401
    import peft  # noqa: F401
    import rich.console  # noqa: F401 - the command line's own (the layer above this one)
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import trl
    import typer  # noqa: F401

    import autotrain.config.load  # noqa: F401
    import autotrain.training.checkpoints  # noqa: F401
    import autotrain.training.guards  # noqa: F401
    import autotrain.training.metrics_log  # noqa: F401
    import autotrain.training.progress  # noqa: F401
    import autotrain.training.signals  # noqa: F401
    from autotrain.config.trainers import DEFAULT
    from autotrain.trainers import llm_builder
    from autotrain.training.allocator import return_freed_blocks
    from autotrain.training.quiet import quiet_libraries

    quiet_libraries()
    llm_builder(DEFAULT)  # the default trainer's builder module
    for name in ("SFTTrainer", "DPOTrainer", "SFTConfig"):  # TRL imports its trainers' modules on first use
        getattr(trl, name)
    imported = _resident()
    return_freed_blocks()
    _data()
    _model_code()
    return {"bytes": _resident(), "imports": imported, "measured": time.strftime("%Y-%m-%dT%H:%M:%S")}


def _data() -> None:
    """Rows of JSON lines through datasets as a run's data goes the first time: read into Arrow and written
    to a cache of their own, then tokenized by one `map` (a token per character: the run's own tokenizer is
    measured in its process, `tokenizer_bytes`) and cut into blocks with their labels and masks by another,
    as the trainer of raw text does (the data path that holds the most): the readers, writers and memory
    pools that sets up, and what Python keeps of it."""
    import tempfile

    import datasets

    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 110)  # about 5000 characters
    with tempfile.TemporaryDirectory(prefix="autotrain-probe-") as folder:
        path = Path(folder) / "rows.jsonl"
        path.write_text("".join(json.dumps({"text": text}) + "\n" for _ in range(64)), encoding="utf-8")
        rows = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=folder)
        tokens = rows.map(_characters, batched=True, remove_columns=["text"])
        tokens.map(_blocks, batched=True, remove_columns=["input_ids"])


def _characters(batch: dict) -> dict:
    return {"input_ids": [[ord(c) % 30000 for c in text] for text in batch["text"]]}


def _blocks(batch: dict, block: int = 512) -> dict:
    flat = [token for ids in batch["input_ids"] for token in ids]
    blocks = [flat[i : i + block] for i in range(0, len(flat) // block * block, block)]
    return {"input_ids": blocks, "labels": [list(b) for b in blocks], "attention_mask": [[1] * block for _ in blocks]}


def _model_code() -> None:
    """A small Llama built on the meta device: the model-building code imported, no weights allocated."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
    with torch.device("meta"):
        AutoModelForCausalLM.from_config(config)


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))), flush=True)
