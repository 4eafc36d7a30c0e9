"""Everything a config needs from this machine, checked before any data is prepared or model loaded.

Each missing thing is one line, within seconds of the start: a problem (the run stops with exit code 2)
or, where the run has a safe way on, a note. Packages: bitsandbytes (quantized loading, 8-bit optimizers),
flash-attn (`attn_implementation: flash_attention_2`), DeepSpeed, Ray, a logger's, an optimizer's, gguf,
liger-kernel and cut-cross-entropy (`cross_entropy: liger | cut_cross_entropy`).
The device: a CUDA build of torch and a visible GPU wherever the config asks for one, with the reason
none is visible (a CPU-only torch, a container started without `--gpus all`, CUDA_VISIBLE_DEVICES);
what several processes need (run.distributed.hardware_problems); a C compiler where CAME compiles its
step (a note: it then takes the eager step). A base_model or data.path that can only be a local path and
is not here. And the hub, for what the config fetches from it.

The runner runs this in every process before the data; `--dry-run` prints the same lines.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field

from autotrain.config.base import TaskConfig
from autotrain.hints import compiler_hint, install_hint
from autotrain.training.plan import RunPlan


@dataclass
class Preflight:
    problems: list[str] = field(default_factory=list)  # each stops the run (exit code 2)
    notes: list[str] = field(default_factory=list)  # each said once, and the run goes on


def preflight(cfg: TaskConfig, plan: RunPlan) -> Preflight:
    """Every problem and note of `cfg` on this machine, in the order a reader fixes them."""
    from autotrain.training.hub import hub_problems, missing_paths

    gpus = visible_gpu_count()
    why = "" if gpus else why_no_gpu()
    found = Preflight(notes=list(plan.notes))
    found.problems += [_with_reason(line, why) for line in plan.problems]
    found.problems += _package_problems(cfg)
    found.problems += _optimizer_problems(cfg.training_args.optimizer, plan.precision.device, why)
    found.problems += _quantization_problems(cfg, plan, why)
    found.problems += _attention_problems(cfg, plan, why)
    found.problems += _loss_problems(plan, why)
    if plan.world_size > 1:
        from autotrain.run.distributed import hardware_problems

        found.problems += hardware_problems(cfg, gpus, plan.processes_per_machine, why)
    if not gpus and torch_is_cuda_build() and not any(why in line for line in found.problems):
        found.notes.append(f"no GPU is visible ({why}): this run trains on the CPU")
    compiler = _compiler_note(plan)
    if compiler:
        found.notes.append(compiler)
    found.problems += missing_paths(cfg)
    found.problems += hub_problems(cfg)
    return found


# --- the device --------------------------------------------------------------------------------------------


def visible_gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def torch_is_cuda_build() -> bool:
    import torch

    return torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None


def in_container() -> bool:
    """Docker leaves /.dockerenv, Podman /run/.containerenv; otherwise PID 1's cgroup may name the runtime."""
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        with open("/proc/1/cgroup", encoding="utf-8") as cgroup:
            text = cgroup.read()
    except OSError:
        return False
    return any(word in text for word in ("docker", "kubepods", "containerd", "libpod", "lxc"))


def why_no_gpu() -> str:
    """Why torch sees no GPU here, and what to do about it, in a few words."""
    import torch

    if not torch_is_cuda_build():
        return f"this torch ({torch.__version__}) is a CPU-only build: install a CUDA build of torch"
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU"
    if in_container():
        return "this container was started without GPUs: start it with --gpus all (docker run --gpus all ...)"
    return "torch finds no CUDA device: is the NVIDIA driver installed (nvidia-smi)?"


def _with_reason(line: str, why: str) -> str:
    """`line`, a problem of the plan's, with why no GPU is visible where it asks for one."""
    return f"{line} ({why})" if why and "CUDA GPU" in line else line


def _aside(*parts: str) -> str:
    """` (a; b)` of the parts that say something, or nothing."""
    said = [part for part in parts if part]
    return f" ({'; '.join(said)})" if said else ""


# --- packages ----------------------------------------------------------------------------------------------


def _missing(module: str) -> bool:
    return importlib.util.find_spec(module) is None


def _package_problems(cfg: TaskConfig) -> list[str]:
    from autotrain.config.tasks import missing_extra

    problems = [p for p in [missing_extra(cfg.task)] if p]
    if cfg.log != "none" and _missing(cfg.log):
        problems.append(f"log: {cfg.log} needs the `{cfg.log}` package: {install_hint(cfg.log)} (or set `log: none`)")
    if getattr(cfg, "gguf", None) is not None and _missing("gguf"):
        problems.append(f"base_model: loading a GGUF file needs the gguf package: {install_hint('gguf')}")
    if cfg.distributed.backend == "ray" and _missing("ray"):
        problems.append(f"distributed.backend: ray needs Ray Train: {install_hint(extra='ray')}")
    return problems


def _optimizer_problems(name: str, device: str, why: str) -> list[str]:
    """What the optimizer table says this optimizer needs, against what this machine has."""
    from autotrain.optimizers.table import OPTIMIZERS

    spec, problems = OPTIMIZERS[name], []
    instead = "or use `came_8bit`: it needs nothing extra and runs everywhere"
    if spec.package and _missing(spec.import_name):
        problems.append(
            f"training_args.optimizer: {name} needs {spec.package}: {install_hint(spec.package)} (or {instead})"
        )
    if spec.cuda_only and device != "cuda":
        problems.append(f"training_args.optimizer: {name} needs a CUDA GPU and none is visible{_aside(why, instead)}")
    return problems


def _quantization_problems(cfg: TaskConfig, plan: RunPlan, why: str) -> list[str]:
    peft = getattr(cfg, "peft", None)
    quantization = getattr(peft, "quantization", None)
    if not (quantization and peft.enabled):
        return []
    problems = []
    if plan.precision.device != "cuda":
        problems.append(
            f"peft.quantization: {quantization} loads through bitsandbytes and needs a CUDA GPU; none is "
            f"visible{_aside(why)}. Remove `peft.quantization` to train on this machine"
        )
    if _missing("bitsandbytes"):
        problems.append(
            f"peft.quantization: {quantization} loads through the bitsandbytes package: {install_hint('bitsandbytes')}"
        )
    return problems


def _attention_problems(cfg: TaskConfig, plan: RunPlan, why: str) -> list[str]:
    """flash_attention_2 the plan kept (a padded run, or one where it runs): the package must import."""
    if plan.attn_implementation != "flash_attention_2":
        return []
    asked, instead = "attn_implementation: flash_attention_2", "or set attn_implementation: sdpa"
    if plan.precision.device != "cuda":
        return [f"{asked} needs a CUDA GPU and none is visible{_aside(why, instead)}"]
    if _missing("flash_attn"):
        return [f"{asked} needs the flash-attn package: {install_hint('flash-attn')}{_aside(instead)}"]
    try:  # the usual failure: a wheel built against another torch or CUDA, found but not importable
        import flash_attn  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - whatever the import raises, the model load would raise it too
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [
            f"{asked}: the flash-attn package does not import ({first}); reinstall it for this torch: "
            f"{install_hint('flash-attn --no-build-isolation')}{_aside(instead)}"
        ]
    return []


# training_args.cross_entropy: the CUDA kernels of other packages -> (pip name, module)
LOSS_PACKAGES = {
    "liger": ("liger-kernel", "liger_kernel"),
    "cut_cross_entropy": ("cut-cross-entropy", "cut_cross_entropy"),
}


def _loss_problems(plan: RunPlan, why: str) -> list[str]:
    """A kernel loss the plan kept needs its package and a CUDA GPU (its Triton kernels run nowhere else)."""
    if plan.cross_entropy not in LOSS_PACKAGES:
        return []
    package, module = LOSS_PACKAGES[plan.cross_entropy]
    asked, instead = f"training_args.cross_entropy: {plan.cross_entropy}", "or set cross_entropy: chunked"
    problems = []
    if plan.precision.device != "cuda":
        problems.append(f"{asked} runs CUDA kernels and needs a CUDA GPU; none is visible{_aside(why, instead)}")
    if _missing(module):
        problems.append(f"{asked} needs the {package} package: {install_hint(package)}{_aside(instead)}")
    return problems


# --- CAME's compiler ---------------------------------------------------------------------------------------


def _compiler_note(plan: RunPlan) -> str | None:
    """A note where CAME would compile its step (compile: true, or auto in a run where compiling pays) and no
    C compiler runs here: it then takes the eager step (came_compile.Compiler: same maths, slower)."""
    from autotrain.optimizers.table import OPTIMIZERS

    parts = OPTIMIZERS[plan.optimizer.name].part_kwargs(plan.optimizer.kwargs)
    compiling = [kwargs for _, kwargs in parts if kwargs.get("compile", False) is not False]
    if not compiling:
        return None
    step = compiling[0]
    device = plan.precision.device
    if step["compile"] is None:
        from autotrain.optimizers.came_compile import CPU_MIN_NUMEL, compiles

        if not compiles(device, CPU_MIN_NUMEL, step.get("total_steps")):
            return None  # auto compiles nothing in a run this short
    if device == "cuda":  # Triton builds its launchers with a C compiler
        wanted, candidates = "a C compiler for Triton (CC, gcc or clang)", _c_compilers()
    elif device == "cpu":  # inductor's C++ kernels (its config's cpp.cxx)
        wanted, candidates = "a C++ compiler (CXX, or g++)", [os.environ.get("CXX", "g++")]
    else:
        return None
    if any(_runs(compiler) for compiler in candidates):
        return None
    return (
        f"optimizer: CAME compiles its step here, and {wanted} was not found or does not run: it will take the "
        f"eager step (the same maths, slower); to compile it, {compiler_hint()}"
    )


def _c_compilers() -> list[str]:
    """What Triton would build with: $CC, else gcc, else clang (triton.runtime.build)."""
    import shutil

    if os.environ.get("CC"):
        return [os.environ["CC"]]
    return [found for found in (shutil.which("gcc"), shutil.which("clang")) if found]


def _runs(compiler: str) -> bool:
    import shutil
    import subprocess

    path = shutil.which(compiler)
    if path is None:
        return False
    try:
        return subprocess.run([path, "--version"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
