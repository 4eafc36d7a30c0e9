"""Turn `mixed_precision: auto | no | fp16 | bf16` into what the hardware can actually do."""

from __future__ import annotations

from dataclasses import dataclass

from autotrain.errors import UserInputError


@dataclass(frozen=True)
class Precision:
    mode: str  # "no" | "fp16" | "bf16"
    device: str  # "cuda" | "mps" | "cpu"

    @property
    def training_args(self) -> dict:
        return {"bf16": self.mode == "bf16", "fp16": self.mode == "fp16", "use_cpu": self.device == "cpu"}


def detect_device() -> str:
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def resolve_precision(requested: str, device: str | None = None) -> Precision:
    """auto: bf16 where the GPU supports it, else fp16 on CUDA, fp32 on CPU.

    fp16 on the CPU is refused (no fast kernels, and the Trainer's grad scaler needs CUDA); bf16 on the CPU
    runs through autocast.
    """
    import torch

    device = device or detect_device()
    if requested == "auto":
        if device == "cuda":
            return Precision("bf16" if torch.cuda.is_bf16_supported() else "fp16", device)
        return Precision("no", device)
    if requested == "fp16" and device == "cpu":
        raise UserInputError(
            "training_args.mixed_precision: fp16 needs a CUDA GPU and none is visible; use `bf16` or `no` on the CPU"
        )
    if requested == "bf16" and device == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserInputError("training_args.mixed_precision: bf16 is not supported by this GPU; use `fp16`")
    return Precision(requested, device)
