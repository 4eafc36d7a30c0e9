"""Will it fit? The memory one device needs to train a config, estimated before any weight is loaded,
and the peak measured at the end of a run to set beside it.

The model's size and the activations it keeps per token come from its `config.json`, built and run
forward on the meta device (autotrain.training.model_shape); everything else is arithmetic here, without
torch: bytes per parameter for weights, gradients and optimizer state (the optimizer table's
`state_bytes`), and what a sharding strategy divides by the number of processes.

Figures are bytes on one device: GPU memory (`torch.cuda.max_memory_allocated`), or on the CPU the growth
of the process's anonymous resident memory over what it holds besides the model when training starts (the
Python process, torch, the data, the tokenizer, the Trainer: measured, and left out of both sides; see
`mark_baseline`). Pages of files mapped into the process (torch's 400 MB of shared libraries, mostly) are
left out: they can be dropped and read again, and how many of them count as resident depends on the page
cache (a freshly installed library maps in larger pieces: 78 MB more at import, 25 MB more during a tiny
model's step), not on the run. glibc's malloc keeps blocks a step freed for the next one (its mmap
threshold grows with the blocks freed), so on the CPU the resident peak can run above the live peak
estimated here; `MALLOC_MMAP_THRESHOLD_=131072` returns large blocks to the system and keeps the two close.
"""

from __future__ import annotations

import dataclasses
import os
import resource
from dataclasses import dataclass
from typing import Any

from autotrain.config.tasks import TASKS

GIB = 1024**3
# A bitsandbytes NF4 weight with double quantization: 4 bits plus one 8-bit scale per 64 weights and one
# fp32 scale per 256 blocks; int8 (LLM.int8): one byte plus a scale per row (negligible).
QUANTIZED_BYTES = {"int4": 0.5 + 1 / 64 + 4 / (64 * 256), "int8": 1.0}
# The loss head. A model's own loss keeps its fp32 logits for backward (in the trace), and while the loss's
# gradient is formed two more fp32 values per token and vocabulary entry exist. TRL's SFT, DPO and GRPO
# trainers compute log-probabilities from the last hidden states in chunks of up to 32768 tokens and keep
# no logits; forming a chunk's logits again in backward, with their gradient, costs about as much.
# Measured on the CPU with benchmarks/memory_estimate.py (SmolLM2-135M: 1.7 and 1.9 values; 2 is used).
LOGITS_TRANSIENT = 2 * 4
CHUNK_TOKENS = 32768
# While a decoder layer runs backward, the gradients of what it kept exist beside what the others keep: one
# more layer's worth without gradient checkpointing. With it, none measurable: the recomputed layer's own
# activations (counted as kept) are freed as its backward goes, and its gradients fit in what they leave.
# Fitted on the tiny Llama, where the layers dominate, against anonymous resident memory.
LAYER_GRADIENTS = {False: 1.0, True: 0.0}


def trainer_spec(setup):
    """The trainer table's entry for the run's trainer (classifiers: a plain one-sequence, own-loss entry)."""
    from autotrain.config.trainers import TRAINERS, TrainerSpec

    return TRAINERS.get(setup.trainer) or TrainerSpec("", "", (), "", "", "")


@dataclass(frozen=True)
class ModelShape:
    """A model as the estimate needs it: parameter counts and activation bytes per token."""

    params: int
    linear_params: int  # in the decoder layers' Linear modules: what 4/8-bit loading quantizes
    lora_params: int  # the LoRA adapter's, for the config's peft settings (0 without)
    largest_param: int
    largest_layer_params: int
    layers: int
    hidden: int
    vocab: int  # causal LMs: the logits' width
    layer_bytes_per_token: float  # kept for backward by one decoder layer
    rest_bytes_per_token: float  # outside the layers: embeddings, final norm, logits, loss
    activation_bytes: int  # bytes of one activation value (4 fp32, 2 bf16 / fp16)
    dora_scratch: int = 0  # bytes of DoRA's weight-norm temporaries in its largest adapted layer (`dora_terms`)


@dataclass(frozen=True)
class Setup:
    """The settings the estimate depends on, taken from a config and its plan (`setup_of`)."""

    trainer: str
    batch_size: int
    length: int
    gradient_checkpointing: bool
    optimizer: str
    precision: str  # no | bf16 | fp16
    device: str
    lora: tuple[int, Any, float] | tuple[int, Any, float, bool] | None  # (r, target modules, dropout[, DoRA])
    quantization: str | None
    world_size: int = 1
    strategy: str = "ddp"
    reshard: bool = True  # fsdp: full shard
    offload: bool = False  # fsdp cpu_offload / deepspeed offload_optimizer
    zero_stage: int = 2
    gradient_accumulation: int = 1

    @property
    def activation_dtype(self) -> str:
        return {"bf16": "bfloat16", "fp16": "float16"}.get(self.precision, "float32")

    @property
    def weight_bytes(self) -> int:
        """The load dtype's bytes (autotrain.trainers.llm.model.load_dtype): half for LoRA on a GPU and for
        bf16 on CUDA, fp32 otherwise (fp16 AMP keeps fp32 master weights; CPU bf16 runs under autocast)."""
        half = self.precision in ("bf16", "fp16")
        if self.trainer in TASKS and self.trainer != "vlm":  # tasks but llm and vlm load in fp32 (plan.load_dtype)
            return 4
        if half and ((self.lora and self.device != "cpu") or (self.precision == "bf16" and self.device == "cuda")):
            return 2
        return 4


@dataclass(frozen=True)
class Estimate:
    parts: dict[str, int]  # weights, gradients, optimizer, activations, ...: at the peak, on one device
    peak: int
    phase: str  # when the peak comes: "backward", "optimizer step" or "loading"
    notes: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        notes = list(self.notes)
        return {"bytes_per_device": self.peak, "peak_during": self.phase, "parts": self.parts, "notes": notes}


def estimate(shape: ModelShape, setup: Setup) -> Estimate:
    """Bytes one device holds at the peak of a training step."""
    from autotrain.optimizers.table import OPTIMIZERS

    spec = OPTIMIZERS[setup.optimizer]
    w = setup.weight_bytes
    quantized = setup.quantization if setup.lora else None
    notes = []
    if setup.device == "cpu" and "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        notes.append(
            "CPU: this is live memory; glibc's allocator keeps freed blocks, so resident memory can run up to "
            "about 2x it on a short run (MALLOC_MMAP_THRESHOLD_=131072 returns them, at some speed)"
        )
    if quantized:  # the rest (embeddings, norms, output layer) is cast to fp32 by prepare_model_for_kbit_training
        weights = shape.linear_params * QUANTIZED_BYTES[quantized] + (shape.params - shape.linear_params) * 4
    else:
        weights = shape.params * w
    trained = shape.lora_params if setup.lora else shape.params
    tw = 4 if setup.lora else w  # PEFT keeps adapter weights in fp32
    weights += shape.lora_params * 4 if setup.lora else 0
    grads = trained * tw
    # The bundled optimizers keep fp32 (or 8-bit) state whatever the weights, and fp32 master weights of half ones.
    state = trained * spec.state_bytes * (1 if spec.state_quantized or spec.bundled else tw / 4)
    state += trained * 4 if spec.bundled and tw == 2 else 0
    extra = {}
    if trainer_spec(setup).reference_model and not setup.lora:
        extra["reference model"] = shape.params * w
    if setup.precision != "no" and w == 4 and not quantized:
        # autocast keeps a half copy of each fp32 weight a matmul used until backward has used it
        extra["autocast weight copies"] = (shape.linear_params if setup.lora else shape.params) * 2
    extra.update(dora_terms(shape, setup))
    acts, logits = _activations(shape, setup)
    weights, grads, state, gathered = _sharded(shape, setup, weights, grads, state, notes)
    if gathered:
        extra["gathered layers"] = gathered
    if setup.strategy == "ddp" and setup.world_size > 1:
        extra["gradient buckets"] = grads  # DDP's reduction buffers: a copy of the gradients
    scratch = step_scratch(shape, setup, trained, tw)
    backward = weights + grads + state + acts + logits + sum(extra.values())
    step = weights + grads + state + scratch + extra.get("reference model", 0) + extra.get("gradient buckets", 0)
    parts = {"weights": weights, "gradients": grads, "optimizer state": state, "activations": acts}
    if logits:
        parts["backward transients (logits, a layer's gradients)"] = logits
    parts.update(extra)
    if step > backward:
        parts = {
            k: v
            for k, v in parts.items()
            if k not in ("activations", "backward transients (logits, a layer's gradients)")
        }
        parts["optimizer step scratch"] = scratch
    parts = {k: int(v) for k, v in parts.items()}
    return Estimate(parts, sum(parts.values()), "optimizer step" if step > backward else "backward", tuple(notes))


def _activations(shape: ModelShape, setup: Setup) -> tuple[float, float]:
    """(kept for backward, transient while the loss's gradient is formed) for one micro-batch."""
    sequences = setup.batch_size * trainer_spec(setup).sequences_per_row
    tokens = sequences * (setup.length if shape.vocab or shape.layers else 1)
    if shape.vocab == 0 and shape.hidden and setup.length == 1:
        tokens = sequences
    layers = shape.layers * shape.layer_bytes_per_token
    if setup.gradient_checkpointing and shape.layers:
        # each layer keeps only its input; backward recomputes one layer at a time
        layers = shape.layers * shape.hidden * shape.activation_bytes + shape.layer_bytes_per_token
    kept = tokens * (layers + shape.rest_bytes_per_token)
    head = min(tokens, CHUNK_TOKENS) if trainer_spec(setup).chunked_head else tokens
    transient = head * shape.vocab * LOGITS_TRANSIENT
    transient += tokens * shape.layer_bytes_per_token * LAYER_GRADIENTS[setup.gradient_checkpointing]
    return kept, transient


def step_scratch(shape: ModelShape, setup: Setup, trained: int, tw: int) -> float:
    """Temporaries of one optimizer step: torch's foreach kernels (CUDA) make one copy of every trained
    parameter at once; the per-tensor loops (the CPU, the bundled optimizers) one of the largest tensor."""
    from autotrain.optimizers.table import OPTIMIZERS

    spec = OPTIMIZERS[setup.optimizer]
    if setup.device == "cuda" and not spec.bundled:
        return trained * tw
    largest = min(shape.largest_param, trained)
    if spec.bundled and spec.factored:
        # CAME steps same-shaped params in chunks of at most an eighth of them all or half the largest
        # (on the CPU at most 2**17 elements; autotrain.optimizers.came_groups): the eager step keeps about
        # four fp32 copies of the largest tensor it steps in place, or five of a gathered chunk (params,
        # gradients and three temporaries); the compiled step fuses those temporaries away and needs less
        # (SmolLM2-135M: 1 MiB compiled, 432 MiB eager, measured). An upper bound on both.
        # (Compiling in the background takes no tensor memory: it traces fake tensors.)
        return max(4 * largest, 5 * trained / 8) * 4
    return largest * 4 * 2


def _sharded(shape: ModelShape, setup: Setup, weights, grads, state, notes: list[str]):
    """Per-device weights, gradients and state under FSDP2 / DeepSpeed ZeRO; DDP replicates all three."""
    n, gathered = setup.world_size, 0
    if n <= 1:
        return weights, grads, state, gathered
    layer = shape.largest_layer_params * setup.weight_bytes
    if setup.strategy == "fsdp":
        if setup.offload:
            notes.append("fsdp cpu_offload: parameters, gradients and optimizer state live in CPU memory")
            return 0, 0, 0, 2 * layer
        weights = weights / n if setup.reshard else weights
        notes.append(
            "fsdp: weights, gradients and optimizer state are sharded over the processes; two layers are "
            "gathered at a time" + ("" if setup.reshard else " (reshard_after_forward false: weights stay whole)")
        )
        return weights, grads / n, state / n, 2 * layer
    if setup.strategy == "deepspeed":
        if setup.weight_bytes == 2:
            state += (shape.lora_params if setup.lora else shape.params) * 4  # ZeRO's fp32 master weights
        if setup.offload:
            notes.append("deepspeed offload_optimizer: optimizer state lives in CPU memory")
            state = 0
        if setup.zero_stage >= 3:
            return weights / n, grads / n, state / n, 2 * layer
        return weights, grads / n, state / n, 0
    return weights, grads, state, gathered


# --- DoRA (peft `use_dora`) ---------------------------------------------------------------------------


def dora_terms(shape: ModelShape, setup: Setup) -> dict[str, int]:
    """What DoRA adds that the trace does not measure. Its magnitude vectors (one value per output of each adapted
    layer) are in `shape.lora_params`, trained like the rest of the adapter; the activations its forward keeps
    (the base output and the adapter's, scaled by magnitude / norm) are traced. Not traced: each adapted layer
    builds its whole adapted weight W + s B A (through an identity matrix of its input width) to take its norm,
    in every forward and, with gradient checkpointing, again in backward's recomputation: one layer's at a time,
    the largest counted here."""
    dora = setup.lora is not None and len(setup.lora) > 3 and setup.lora[3]
    return {"DoRA weight-norm scratch (largest layer)": shape.dora_scratch} if dora and shape.dora_scratch else {}


# --- from a config ----------------------------------------------------------------------------------


def setup_of(cfg, plan) -> Setup:
    """The estimate's settings for a validated config and its plan."""
    args = cfg.training_args
    uses_peft = getattr(cfg, "uses_peft", False)
    dist = cfg.distributed
    length = getattr(args, "max_length", None) or getattr(cfg.data, "max_length", None) or 128
    if TASKS[cfg.task].auto_model in ("AutoModelForImageClassification", "AutoModelForObjectDetection"):
        length = 1  # one image per sample: the trace measures a whole image

    return Setup(
        trainer=cfg.trainer if cfg.task == "llm" else cfg.task,
        batch_size=args.batch_size,
        length=length,
        gradient_checkpointing=args.gradient_checkpointing,
        optimizer=args.optimizer,
        precision=plan.precision.mode,
        device=plan.precision.device,
        lora=(cfg.peft.r, _targets(cfg.peft.target_modules), cfg.peft.dropout, cfg.peft.use_dora)
        if uses_peft
        else None,
        quantization=cfg.peft.quantization if uses_peft else None,
        world_size=plan.world_size,
        strategy=dist.strategy,
        reshard=dist.fsdp.reshard_after_forward if dist.fsdp else True,
        offload=bool((dist.fsdp and dist.fsdp.cpu_offload) or (dist.deepspeed and dist.deepspeed.offload_optimizer)),
        zero_stage=dist.deepspeed.stage if dist.deepspeed else 2,
        gradient_accumulation=args.gradient_accumulation,
    )


def _targets(value):
    return value if isinstance(value, str) else tuple(value)


# --- what the device has, what fits -----------------------------------------------------------------


def available_bytes(device: str) -> int | None:
    """What a run may use: free memory of CUDA device 0, or the machine's available RAM (Linux)."""
    if device == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(0)[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def suggestions(shape_for, setup: Setup, budget: int) -> list[tuple[str, Estimate]]:
    """The cheapest change that fits in `budget`, with its estimate: one change at a time in order of cost
    to the result (smaller batches with more accumulation, gradient checkpointing, an 8-bit optimizer,
    LoRA, 4-bit loading), then the same changes together. `shape_for(setup)` traces a setup's model."""
    from autotrain.optimizers.table import OPTIMIZERS

    changes = []
    batch = setup.batch_size
    while batch > 1:
        batch //= 2
        scale = setup.batch_size // batch
        changes.append(
            (
                f"training_args.batch_size: {batch} with gradient_accumulation: {setup.gradient_accumulation * scale} "
                "(the same effective batch)",
                {"batch_size": batch, "gradient_accumulation": setup.gradient_accumulation * scale},
            )
        )
    if not setup.gradient_checkpointing:
        changes.append(("training_args.gradient_checkpointing: true", {"gradient_checkpointing": True}))
    if OPTIMIZERS[setup.optimizer].state_bytes > 1.0:
        changes.append(("training_args.optimizer: came_8bit", {"optimizer": "came_8bit"}))
    if setup.lora is None:
        changes.append(("peft.enabled: true (LoRA, r 16)", {"lora": (16, "all-linear", 0.05)}))
    if setup.device == "cuda" and setup.quantization is None:
        changes.append(("peft.quantization: int4 (QLoRA)", {"lora": setup.lora or (16, "all-linear", 0.05)}))
        changes[-1][1]["quantization"] = "int4"
    for label, update in changes:
        tried = dataclasses.replace(setup, **update)
        result = estimate(shape_for(tried), tried)
        if result.peak <= budget:
            return [(label, result)]
    combined, labels = setup, []
    for label, update in changes:
        if "batch_size" in update and update["batch_size"] != 1:
            continue
        combined = dataclasses.replace(combined, **update)
        labels.append(label)
        result = estimate(shape_for(combined), combined)
        if result.peak <= budget:
            return [("; ".join(labels), result)]
    return []


# --- measured -------------------------------------------------------------------------------------------

_BASELINE: dict[str, int] = {}


def current_rss() -> int:
    """This process's resident memory now (Linux /proc; 0 where unknown)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def proc_status() -> dict[str, int]:
    """The memory lines of /proc/self/status, in bytes (empty where there is no such file)."""
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name in ("VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem"):
                    found[name] = int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return {}
    return found


def current_anon() -> int:
    """This process's resident memory now that is not a mapped file (see the module's docstring)."""
    status = proc_status()
    if "RssAnon" in status:
        return status["RssAnon"] + status.get("RssShmem", 0)
    return current_rss()


def mark_baseline(model, before_model: int = 0) -> None:
    """Called as training starts: what the process holds besides the model is left out of the measured peak.

    That is the larger of two lower bounds: its anonymous resident memory now less the model's parameters
    and buffers (python, torch, the code loading imported, the data, the tokenizer, the Trainer), and
    `before_model`, the same before the model was loaded (`current_anon()`; the weights of a memory-mapped
    checkpoint become resident only as they are first read, so the first bound can fall short)."""
    import sys

    held = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    _BASELINE["rss"] = max(current_anon() - held, before_model)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_rss() -> int:
    """This process's peak resident memory since it started its program.

    /proc's VmHWM belongs to the process's own memory map, made new at exec. getrusage's ru_maxrss is not:
    Linux carries it over exec, so a run started by fork from a large parent (a test runner, the app, a
    launcher) would report the parent's size as its own peak."""
    status = proc_status()
    if "VmHWM" in status:
        return status["VmHWM"]
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def measured_peak(device: str) -> dict[str, int] | None:
    """The peak a run reached, on the terms of the estimate (see the module's docstring).

    On the CPU: the resident high-water mark less the mapped files resident now. Those only grow while a
    process runs (code is read in as it is first used and rarely dropped), so what is left is at most the
    anonymous memory at the peak, and close to it."""
    if device == "cuda":
        import torch

        return {"max_memory_allocated": int(torch.cuda.max_memory_allocated())}
    if "rss" not in _BASELINE:
        return None
    peak = peak_rss()
    files = proc_status().get("RssFile", 0)
    return {
        "peak_rss": peak,
        "mapped_files_at_end": files,
        "rss_before_model": _BASELINE["rss"],
        "peak_above_baseline": peak - files - _BASELINE["rss"],
    }


def gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB" if value >= GIB / 10 else f"{value / 1024**2:.1f} MiB"
