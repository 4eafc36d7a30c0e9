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


def _header(path: Path) -> tuple[dict, int]:
    """A safetensors file's JSON header and its length (ValueError when there is not even a header)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little") if size >= 8 else -1
        if length < 2 or length > size - 8:
            raise ValueError(f"{size} bytes: not even its header")
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        raise ValueError("the header is not a table of tensors")
    return header, length


def _safetensors_problem(path: Path) -> str | None:
    """The file is 8 bytes of header length, the JSON header, then exactly the bytes its tensors span."""
    size = path.stat().st_size
    try:
        header, length = _header(path)
        ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
        needed = 8 + length + max(ends, default=0)
    except ValueError as exc:
        if str(exc).endswith("not even its header"):
            return f"{path} is cut short ({exc})"
        return f"{path} is damaged (unreadable header: {_first_line(exc)})"
    except (OSError, UnicodeDecodeError, KeyError, TypeError, IndexError, AttributeError) as exc:
        return f"{path} is damaged (unreadable header: {_first_line(exc)})"
    if size != needed:
        return f"{path} is cut short or damaged ({size} bytes where its header needs {needed})"
    return None


def weights_problem(folder: Path) -> str | None:
    """The first `.safetensors` file directly in `folder` that is cut short or damaged, and why; None if whole."""
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    return next((problem for problem in map(_safetensors_problem, files) if problem), None)


def shape_problem(checkpoint: Path, model) -> str | None:
    """The first tensor of the checkpoint's weights whose shape is not the model's, said with both shapes;
    None when every tensor they share fits (or the checkpoint's weights are in no file read here)."""
    saved: dict[str, list] = {}
    for path in sorted(checkpoint.glob("*.safetensors")):
        try:
            header, _ = _header(path)
        except (OSError, ValueError):
            continue  # whether it is whole is checkpoint_problem's to say
        saved.update({k: v.get("shape") for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)})
    if not saved:
        return None
    adapters = list(getattr(model, "peft_config", {}) or {})
    current = {_without_adapter(name, adapters): list(t.shape) for name, t in model.state_dict().items()}
    shared = [name for name in saved if name in current]
    if not shared:
        first = next(iter(saved))
        return f"its tensors are not the model's (the first, `{first}`, is no tensor of the model)"
    for name in shared:
        if saved[name] != current[name]:
            return f"tensor `{name}` is {saved[name]} in the checkpoint and {current[name]} in the model"
    return None


def _without_adapter(name: str, adapters: list[str]) -> str:
    """A PEFT model's parameter name as its saved adapter names it (without the adapter's name)."""
    for adapter in adapters:
        name = name.replace(f".{adapter}.", ".")
    return name


_SHAPE = r"(torch\.Size\(\[[\d, ]*\]\))"
_SIZE_MISMATCH = re.compile(
    rf"size mismatch for ([\w.]+): copying a param with shape {_SHAPE} from checkpoint, "
    rf"the shape in current model is {_SHAPE}"
)


def size_mismatch(exc: BaseException) -> str | None:
    """torch's `Error(s) in loading state_dict ... size mismatch for NAME` as one line, or None."""
    found = _SIZE_MISMATCH.search(str(exc))
    if not found:
        return None
    name, saved, current = found.groups()
    return f"tensor `{name}` is {saved} in the checkpoint and {current} in the model"


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


def load_saved(loader, folder: Path, what: str, **kwargs):
    """`loader.from_pretrained(folder, **kwargs)` for what a run saved in `folder`: a weights file cut short is
    named before the library reads it, and what the library cannot load (a damaged file, one that holds more
    than tensors) is bad input, said in one line."""
    import pickle

    from autotrain.errors import UserInputError

    problem = weights_problem(folder)
    if problem:
        raise UserInputError(f"cannot load the {what} saved in `{folder}`: {problem}")
    try:
        return loader.from_pretrained(str(folder), **kwargs)
    except (OSError, ValueError, pickle.UnpicklingError) as exc:
        raise UserInputError(f"cannot load the {what} saved in `{folder}`: {load_failure(exc)}") from None


def load_failure(exc: BaseException) -> str:
    """Why a library could not load a file, in one line: what a refused unpickling means, else its first line."""
    text = str(exc).strip()
    return refused_pickle(exc) or (text.splitlines()[0] if text else type(exc).__name__)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
