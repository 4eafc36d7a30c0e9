"""Will it fit? The memory one device needs to train a config, estimated before any weight is loaded,
and the peak measured at the end of a run to set beside it.

The model's size, the activations it keeps per token and what one decoder layer's backward adds come from
its `config.json`, built and run forward and backward on the meta device (autotrain.training.model_shape);
everything else is arithmetic here, without torch: bytes per parameter for weights, gradients and optimizer
state (the optimizer table's `state_bytes`), the loss step (autotrain.training.loss_memory), and what a
sharding strategy divides by the number of processes.

A training step does not hold all of it at once. The estimate follows one step through the moments where
memory is highest and takes the largest: the loss's forward and backward (every layer's activations kept),
the last decoder layer's backward (recomputed, with gradient checkpointing), the input embedding's
gradient at the end of backward, the optimizer step, and on the CPU the loading of weights stored in another
dtype. Gradients are freed after each optimizer step (the Trainer sets them to None), so with one micro-batch
per step they exist only as backward forms them; with gradient accumulation they persist through the next
micro-batch.

What the figure covers: on a GPU, the tensors on the device (`torch.cuda.max_memory_allocated` measures the
same). On the CPU, the process's resident memory (its peak: `VmHWM`): the tensors plus the runtime's own
baseline, what a fresh process holds before its model (the interpreter, the libraries' code and heap, the
tokenizer), measured once per machine and environment by autotrain.run.runtime. glibc's malloc keeps
freed blocks unless its mmap threshold is fixed, which a CPU run does (autotrain.training.allocator); where
it cannot, the estimate says it could be low.
"""

from __future__ import annotations

import dataclasses
import os
import resource
from dataclasses import dataclass, field
from typing import Any

from autotrain.config.tasks import TASKS
from autotrain.training.loss_memory import Head, LossStep, loss_step

GIB = 1024**3
# A bitsandbytes NF4 weight with double quantization: 4 bits plus one 8-bit scale per 64 weights and one
# fp32 scale per 256 blocks; int8 (LLM.int8): one byte plus a scale per row (negligible).
QUANTIZED_BYTES = {"int4": 0.5 + 1 / 64 + 4 / (64 * 256), "int8": 1.0}
# The collated batch: input_ids, attention_mask, labels and one more mask or position column, int64
BATCH_COLUMNS = 4
INT64 = 8
# What a run holds beyond the runtime's baseline before its first step and that the probe does not load:
# the tokenized data's tables and the Trainer, accelerate's state and the callbacks' objects. Measured
# with benchmarks/memory_estimate.py --phases (18-21 MiB for tiny-llama and SmolLM2-135M on 64 rows).
RUN_OBJECTS = 24 * 2**20


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
    rest_bytes_per_token: float  # outside the layers: embeddings, final norm (a head and loss traced inside)
    activation_bytes: int  # bytes of one activation value (4 fp32, 2 bf16 / fp16)
    dora_scratch: int = 0  # bytes of DoRA's weight-norm temporaries in its largest adapted layer (`dora_terms`)
    # what the last decoder layer's backward adds over what was alive as it began (None: not traced)
    layer_backward_bytes_per_token: float | None = None
    head_params: int = 0  # the output head's weight (vocabulary x hidden)
    tied: bool = False  # the input embedding is the head's weight
    stored_bytes: int = 0  # bytes per parameter in the checkpoint, as its config.json says (0: unknown)


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
    loss: str = ""  # fused | full | chunked | model (see autotrain.training.loss_memory); "": the trainer's
    runtime: int = 0  # CPU: the runtime's resident baseline (autotrain.run.runtime); 0 on a GPU
    malloc: str = "returning"  # CPU: autotrain.training.allocator.mode()
    low: tuple[str, ...] = ()  # what the config does that the estimate may count short (said with it)
    notes: tuple[str, ...] = ()  # what it counts by a bound rather than as it runs

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

    @property
    def loss_path(self) -> str:
        if self.loss:
            return self.loss
        if self.trainer in TASKS:  # a task's model computes its own loss in the traced forward pass
            return "model"
        return "fused" if trainer_spec(self).chunked_head else "full"


@dataclass(frozen=True)
class Estimate:
    parts: dict[str, int]  # runtime, weights, gradients, optimizer state, activations, ...: at the peak
    peak: int
    phase: str  # when the peak comes: "loss backward", "optimizer step", "loading", ...
    notes: tuple[str, ...] = ()
    phases: dict[str, int] = field(default_factory=dict)  # every moment's total
    low: tuple[str, ...] = ()  # why the figure could be below what the run reaches
    moments: dict[str, dict[str, int]] = field(default_factory=dict)  # every moment's parts

    def record(self) -> dict[str, Any]:
        return {
            "bytes_per_device": self.peak,
            "peak_during": self.phase,
            "parts": self.parts,
            "phases": self.phases,
            "notes": list(self.notes),
            "could_be_low": list(self.low),
        }


@dataclass(frozen=True)
class _Terms:
    """Every term of one step, in bytes on one device."""

    runtime: int
    weights: float
    gradients: float
    head_gradient: float  # the output head's share of `gradients` (trained head only)
    state: float
    activations: float
    loss: LossStep
    layer: float  # the last decoder layer's backward: its recomputation (checkpointing) and what it adds
    embedding: float  # the input embedding's dense gradient, formed at the end of backward
    scratch: float
    batch: float
    loading: float  # the checkpoint's pages read while weights are converted to another dtype (CPU)
    extra: dict[str, float]


def estimate(shape: ModelShape, setup: Setup) -> Estimate:
    """Bytes one device holds at the peak of a training step (see the module's docstring)."""
    notes: list[str] = list(setup.notes)
    terms = _terms(shape, setup, notes)
    moments = {
        moment: {name: int(value) for name, value in parts.items() if value}
        for moment, parts in _moments(terms, setup).items()
    }
    phase = max(moments, key=lambda name: sum(moments[name].values()))
    totals = {name: sum(parts.values()) for name, parts in moments.items()}
    low = _could_be_low(shape, setup)
    return Estimate(moments[phase], totals[phase], phase, tuple(notes), totals, low, moments)


def _terms(shape: ModelShape, setup: Setup, notes: list[str]) -> _Terms:
    from autotrain.optimizers.table import OPTIMIZERS

    spec = OPTIMIZERS[setup.optimizer]
    w = setup.weight_bytes
    quantized = setup.quantization if setup.lora else None
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
    weights, grads, state, gathered = _sharded(shape, setup, weights, grads, state, notes)
    if gathered:
        extra["gathered layers"] = gathered
    if setup.strategy == "ddp" and setup.world_size > 1:
        extra["gradient buckets"] = grads  # DDP's reduction buffers: a copy of the gradients
    head_trained = not setup.lora and shape.head_params > 0
    sequences = setup.batch_size * trainer_spec(setup).sequences_per_row
    activations, layer = _activations(shape, setup, sequences, notes)
    sizes = sequences, setup.length, shape.vocab, shape.hidden, shape.activation_bytes, w
    head = Head(*sizes, head_trained, setup.device)
    loss = loss_step(setup.loss_path, head)
    return _Terms(
        runtime=setup.runtime + (RUN_OBJECTS if setup.runtime else 0),
        weights=weights,
        gradients=grads,
        head_gradient=shape.head_params * tw if head_trained else 0,
        state=state,
        activations=activations,
        loss=loss,
        layer=layer,
        embedding=shape.head_params * tw if head_trained else 0,  # tied or not: vocabulary x hidden
        scratch=step_scratch(shape, setup, trained, tw),
        batch=sequences * setup.length * BATCH_COLUMNS * INT64 if shape.vocab or shape.layers else 0,
        loading=_loading(shape, setup, w),
        extra=extra,
    )


def _moments(t: _Terms, setup: Setup) -> dict[str, dict[str, float]]:
    """The parts alive at each moment of a step where memory is highest (see the module's docstring)."""
    base = {"runtime": t.runtime, "weights": t.weights, "optimizer state": t.state, "batch": t.batch, **t.extra}
    during = t.gradients if setup.gradient_accumulation > 1 else 0  # kept from the previous micro-batch
    kept = {**base, "activations": t.activations + t.loss.kept}
    moments = {
        "loss forward": {**kept, "gradients": during, "loss step": t.loss.forward},
        "loss backward": {**kept, "gradients": during, "loss step": t.loss.backward},
        "layer backward": {**kept, "gradients": during or t.head_gradient, "layer backward": t.layer},
        "optimizer step": {**base, "gradients": t.gradients, "optimizer step scratch": t.scratch},
    }
    if t.embedding:
        moments["embedding backward"] = {**base, "gradients": t.gradients, "embedding gradient": t.embedding}
    if t.loading:
        moments["loading"] = {"runtime": t.runtime, "weights": t.weights, "checkpoint being converted": t.loading}
    if setup.device == "cuda":  # device memory only: the process's own is not on the GPU
        for parts in moments.values():
            parts.pop("runtime", None)
    return moments


def _activations(shape: ModelShape, setup: Setup, sequences: int, notes: list[str]) -> tuple[float, float]:
    """(kept for backward through the step, the last layer's backward) for one micro-batch."""
    tokens = sequences * (setup.length if shape.vocab or shape.layers else 1)
    if shape.vocab == 0 and shape.hidden and setup.length == 1:
        tokens = sequences
    one_layer = tokens * shape.layer_bytes_per_token
    backward = shape.layer_backward_bytes_per_token
    if backward is None:
        # not traced: the gradients of everything the layer kept, at most once each (an upper bound)
        notes.append("a decoder layer's backward was not traced for this model: counted as its activations again")
        backward = shape.layer_bytes_per_token
    if setup.gradient_checkpointing and shape.layers:
        # each layer keeps only its input; its backward recomputes the layer first
        layers = shape.layers * shape.hidden * shape.activation_bytes * tokens
        return layers + tokens * shape.rest_bytes_per_token, one_layer + tokens * backward
    return shape.layers * one_layer + tokens * shape.rest_bytes_per_token, tokens * backward


def _loading(shape: ModelShape, setup: Setup, w: int) -> float:
    """CPU: weights stored in another dtype than they are loaded in are converted while the checkpoint's
    pages are read, which stay resident until loading ends; weights stored as loaded are mapped, not copied."""
    if setup.device != "cpu" or not shape.stored_bytes or shape.stored_bytes == w:
        return 0
    return shape.params * shape.stored_bytes


def _could_be_low(shape: ModelShape, setup: Setup) -> tuple[str, ...]:
    low = list(setup.low)
    if setup.device == "cpu" and setup.malloc != "returning":
        low.append(
            "CPU: malloc keeps freed blocks (MALLOC_MMAP_THRESHOLD_ / GLIBC_TUNABLES set, AUTOTRAIN_MALLOC=system, or "
            "not glibc): resident memory can run up to about 2x the tensors"
        )
    if setup.device == "cpu" and not setup.runtime:
        low.append("CPU: the runtime's own memory (python, libraries, tokenizer) could not be measured: left out")
    if not shape.layers:
        low.append("no stack of decoder layers found in this model: a layer's backward is not counted")
    if setup.loss_path == "model" and shape.vocab:
        low.append("the loss inside the model's forward: its backward's gradient of the logits is not counted")
    if setup.world_size > 1:
        low.append("several processes: the collectives' own buffers are not counted")
    return tuple(low)


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
        # (The warm-up thread compiles by stepping scratch tensors of one chunk's layout, a few chunk-sized
        # copies; the compiler's own host memory, ~140 MiB more RSS measured on SmolLM2 with the CPU's
        # compile, is not a tensor and is not counted here.)
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
    """The estimate's settings for a validated config and its plan (the batch is the plan's: `auto`
    resolved)."""
    from autotrain.training.allocator import mode

    args = cfg.training_args
    uses_peft = getattr(cfg, "uses_peft", False)
    dist = cfg.distributed
    length = getattr(args, "max_length", None) or getattr(cfg.data, "max_length", None) or 128
    if TASKS[cfg.task].auto_model in ("AutoModelForImageClassification", "AutoModelForObjectDetection"):
        length = 1  # one image per sample: the trace measures a whole image
    loss, notes, low = _loss_path(cfg, plan)
    if getattr(cfg, "gguf", None) is not None and plan.precision.device == "cpu":
        low += ("a GGUF base model is de-quantized while it loads: that moment is not counted",)
    return Setup(
        trainer=cfg.trainer if cfg.task == "llm" else cfg.task,
        batch_size=plan.batch_size,
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
        gradient_accumulation=plan.gradient_accumulation,
        loss=loss,
        malloc=mode(),
        low=low,
        notes=notes,
    )


def _loss_path(cfg, plan) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(the loss path, notes, could-be-low reasons) of the loss the plan decided (`plan.cross_entropy`; "" for
    the trainers that compute it their own way, which the trainer table says: TRL's fused head or the model's
    own loss). `chunked` is autotrain's chunked cross-entropy for the trainers that compute their loss with it
    (those with the table's `kernel_losses`) and TRL's fused LM head for the others."""
    from autotrain.config.trainers import TRAINERS

    if cfg.task != "llm":
        return "", (), ()
    spec = TRAINERS[cfg.trainer]
    if not spec.generates:  # a scorer: its loss is on one value per sequence
        return "model", (), ()
    chosen = plan.cross_entropy
    if chosen == "chunked":
        return ("chunked" if spec.kernel_losses else "fused"), (), ()
    if chosen in ("liger", "cut_cross_entropy"):
        return "full", (f"cross_entropy: {chosen}: its kernel is counted as the full loss (an upper bound)",), ()
    return chosen, (), ()


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
    """This process's resident memory now that is not a mapped file: what it would give back by ending."""
    status = proc_status()
    if "RssAnon" in status:
        return status["RssAnon"] + status.get("RssShmem", 0)
    return current_rss()


def mark_baseline(model, before_model: int = 0) -> None:
    """Called as training starts: what the process holds then, for run.json (the runtime's baseline as this
    run measured it; `before_model`: resident memory before the model was loaded), and the start of the
    GPU's peak statistics."""
    import sys

    status = proc_status()
    _BASELINE["rss_at_start"] = status.get("VmRSS", current_rss())
    _BASELINE["files_at_start"] = status.get("RssFile", 0)  # of it, pages of mapped files (code, weights)
    _BASELINE["rss_before_model"] = before_model
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
    """The peak a run reached, on the terms of the estimate: the GPU's allocated memory since training
    started; on the CPU the process's resident high-water mark (what it held at training start and before
    its model beside it)."""
    if device == "cuda":
        import torch

        return {"max_memory_allocated": int(torch.cuda.max_memory_allocated())}
    if "rss_at_start" not in _BASELINE:
        return None
    return {"peak_rss": peak_rss(), **_BASELINE}


def measured_value(measured: dict[str, int]) -> int:
    """The one figure of `measured_peak` the estimate is set beside."""
    return measured.get("max_memory_allocated", measured.get("peak_rss", 0))


def gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB" if value >= GIB / 10 else f"{value / 1024**2:.1f} MiB"
