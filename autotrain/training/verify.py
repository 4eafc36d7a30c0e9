"""Is a checkpoint whole? Checked before resuming from it, so that a file cut short (a full disk, a copy
that stopped) or one that holds more than tensors is named here, instead of failing inside the library.

What is checked costs little, whatever the model's size:
- `trainer_state.json` parses and has a `global_step`;
- every `.safetensors` file is as long as its header says (header read, tensors not);
- the torch files the Trainer loads (optimizer, scheduler, scaler, RNG state, `pytorch_model.bin`) are
  whole zip archives and load with `weights_only=True`, memory-mapped (their tensors are not read). A file
  that needs more than that is refused: loading it could run code, and it is not loaded at all.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# The torch files the Trainer reads back on resume, each with `torch.load(..., weights_only=True)`.
_TORCH_FILES = re.compile(r"^(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth|pytorch_model\.bin)$")


def checkpoint_problem(folder: Path) -> str | None:
    """The first file of `folder` that cannot be resumed from, and why; None when all check out."""
    checks = [_state_problem(folder / "trainer_state.json")]
    checks += [_index_problem(p) for p in sorted(folder.rglob("*.safetensors.index.json"))]
    checks += [_safetensors_problem(p) for p in sorted(folder.rglob("*.safetensors"))]
    checks += [_torch_problem(p) for p in sorted(folder.iterdir()) if _TORCH_FILES.match(p.name)]
    return next((problem for problem in checks if problem), None)


def _state_problem(path: Path) -> str | None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return f"{path} is cut short or damaged ({_first_line(exc)})"
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return f"{path} is not a trainer state (no global_step)"
    return None


def _index_problem(path: Path) -> str | None:
    try:
        shards = set(json.loads(path.read_text(encoding="utf-8"))["weight_map"].values())
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{path} is cut short or damaged ({_first_line(exc)})"
    missing = sorted(name for name in shards if not (path.parent / str(name)).is_file())
    return f"{path} names {missing[0]}, which is missing" if missing else None


def _safetensors_problem(path: Path) -> str | None:
    """The file is 8 bytes of header length, the JSON header, then exactly the bytes its tensors span."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            length = int.from_bytes(handle.read(8), "little") if size >= 8 else -1
            if length < 2 or length > size - 8:
                return f"{path} is cut short ({size} bytes: not even its header)"
            header = json.loads(handle.read(length))
        ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
        needed = 8 + length + max(ends, default=0)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        return f"{path} is damaged (unreadable header: {_first_line(exc)})"
    if size != needed:
        return f"{path} is cut short or damaged ({size} bytes where its header needs {needed})"
    return None


def _torch_problem(path: Path) -> str | None:
    import pickle
    import zipfile

    import torch

    if not zipfile.is_zipfile(path):
        return f"{path} is cut short or damaged (not a whole torch archive)"
    try:
        with _trainer_safe_globals():
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError:
        return f"{path} {REFUSED_PICKLE}"
    except Exception as exc:  # a damaged archive: torch and zipfile raise several kinds
        return f"{path} is damaged ({type(exc).__name__}: {_first_line(exc)})"
    return None


def _trainer_safe_globals():
    """The numpy types the Trainer allows in its own RNG-state files (and nothing else)."""
    import contextlib

    try:
        from transformers.trainer_pt_utils import safe_globals
    except ImportError:
        return contextlib.nullcontext()
    return safe_globals()


REFUSED_PICKLE = (
    "holds objects other than tensors and plain data; autotrain does not load it, since loading it could run code"
)


def refused_pickle(exc: BaseException) -> str | None:
    """For torch's refusal to unpickle a file with `weights_only=True`: what happened, without its advice
    to load the file with `weights_only=False` (that runs whatever the file holds)."""
    text = str(exc)
    if "weights_only" not in text and "Weights only load failed" not in text:
        return None
    return f"a file {REFUSED_PICKLE}"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
