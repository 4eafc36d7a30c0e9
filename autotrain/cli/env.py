"""`autotrain env`: what a bug report needs."""

from __future__ import annotations

import platform
import sys


def _version(name: str) -> str:
    from importlib import metadata  # here, not at the top: it costs every command ~15 ms at start-up

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def env() -> None:
    """Print versions of python and the training stack, CUDA, GPUs and precision support."""
    from autotrain import __version__

    rows = [("autotrain", __version__), ("python", sys.version.split()[0]), ("platform", platform.platform())]
    for name in (
        "torch",
        "transformers",
        "trl",
        "peft",
        "accelerate",
        "datasets",
        "bitsandbytes",
        "deepspeed",
    ):
        rows.append((name, _version(name)))
    try:
        import torch
    except ImportError:
        rows.append(("cuda", "unknown (torch not importable)"))
    else:
        cuda = torch.cuda.is_available()
        rows.append(("cuda available", str(cuda)))
        rows.append(("cuda version", str(torch.version.cuda)))
        if cuda:
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            rows.append(("gpus", f"{len(names)} x " + ", ".join(sorted(set(names)))))
            rows.append(("bf16 supported", str(torch.cuda.is_bf16_supported())))
            rows.append(("fp16 supported", "True"))
        else:
            rows.append(("gpus", "none"))
            rows.append(("bf16 supported", "cpu autocast only"))
            rows.append(("fp16 supported", "False (no CUDA)"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
