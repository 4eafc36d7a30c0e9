"""Checks that need a CUDA GPU, in parts of at most 8 minutes each, run in order of risk (what would fail a
user's first run on a GPU host first), each in a child process of its own.

    python benchmarks/gpu_checks.py [--parts 0,1,2,3] [--budget-s 840] [--out DIR]
    python benchmarks/gpu_checks.py --cpu-smoke          # every part's code path, tiny sizes, on the CPU

--budget-s: the seconds this run may take in all (a lent GPU gives 15 minutes, start-up included). A part
runs with a limit of min(8 minutes, what is left); one whose estimate (``PARTS``) no longer fits is skipped
and named. Each part prints its lines as it goes and writes its figures to DIR/part-N.json (on a lent
device, pass --out "$OUT" so that they come back).

0. Inventory: nvidia-smi, the GPU, torch / CUDA / Triton and library versions, bitsandbytes, flash-attn,
   DeepSpeed, a C compiler.
1. CAME's compiled step on CUDA with ``compile: null`` (compiled on the warm-up thread while the first step
   runs eagerly) and ``compile: true``, on bf16 weights (fp32 master weights, as `mixed_precision: auto`
   trains): the first step's and a later step's time against the eager step's, the compiled step's largest
   relative difference from the eager one, any failure (the optimizer's record).
2. Part 1 with no C compiler (``CC=CXX=/bin/false``) and empty Triton and inductor caches, as in a Docker
   image without build tools: the run must end with the eager step (one line per failure), never exit 1.
3. ``autotrain llm`` end to end, ``came_8bit+fused_adam`` with ``mixed_precision: auto``, 240 steps of a
   small Llama: exit status, losses, what run.json records (the plan's dtypes, optimizer_compile, memory).
4. QLoRA (4-bit base, LoRA) through ``autotrain llm``, where bitsandbytes is installed.
5. A reward model with LoRA in fp16 through ``autotrain llm``.
6. Performance on a 0.83B-parameter Llama (random gradients): CAME8Bit (compiled, and captured in a CUDA
   graph) against bitsandbytes' AdamW8bit, fused AdamW and fp32 CAME: ms per step and ratios from this run,
   kernels per step (per group), optimizer-state bytes, the peak extra memory of a step.
7. The memory estimate (run.json) against ``torch.cuda.max_memory_allocated``: bf16 full (AdamW, with gradient
   checkpointing, CAME8Bit, with accumulation), LoRA, QLoRA, 2 steps each through ``autotrain llm`` (target:
   within -5% / +10%); then ``batch_size: auto`` under a ``memory_budget``: the chosen batch's measured peak
   within the budget, and the next larger batch's beside it.
8. SFT's padding-free batches on CUDA: padded vs rows (sdpa) vs one sequence (flash_attention_2).
9. Every bundled optimizer under bf16 / fp16 autocast and with bf16 weights, 30 steps of a small Llama.
10. The next-token loss step on a Llama-3-shaped head (128,256 x 4,096, bf16) at 4,096 tokens, head frozen and
   trained: `cross_entropy` chunked against full, and liger / cut_cross_entropy where their packages are
   installed: the peak memory above the step's inputs and the gradients it leaves (target for chunked: <= 10% of
   the fp32 logits), ms per step (forward and backward, median), and the loss's and gradients' relative
   difference from an fp32 reference.

Without CUDA (and without --cpu-smoke) the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from came_ops import warm_up_done  # noqa: E402

from autotrain.optimizers import CAME, CAME8Bit, CAME8BitFusedAdam, FusedAdam, came_compile  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PART_LIMIT_S = 480  # no part may take longer (a device command is limited to 10 minutes, start-up included)
# part: (what it checks, its estimated seconds on one H200, cold caches)
PARTS = {
    0: ("inventory", 15),
    1: ("CAME's compiled step on CUDA, compile null and true", 150),
    2: ("the same without a C compiler, empty Triton/inductor caches", 120),
    3: ("autotrain llm, came_8bit+fused_adam, mixed_precision auto, 240 steps", 180),
    4: ("QLoRA through autotrain llm", 90),
    5: ("reward model + LoRA in fp16 through autotrain llm", 90),
    6: ("performance on a 0.83B Llama: CAME8Bit vs AdamW8bit vs fused AdamW", 300),
    7: ("memory estimate vs max_memory_allocated, batch_size auto", 300),
    8: ("SFT padding-free batches on CUDA", 40),
    9: ("bundled optimizers under bf16/fp16 autocast and bf16 weights", 120),
    10: ("the loss step: chunked vs full vs liger vs cut_cross_entropy", 60),
}
NO_COMPILER = {"CC": "/bin/false", "CXX": "/bin/false"}


def sizes_for(smoke: bool) -> dict:
    if smoke:
        return {"hidden": 64, "layers": 2, "vocab": 256, "seq": 32, "steps": 6, "reps": 2, "e2e_steps": 6}
    # 0.83B: 16 layers of width 2048 plus a 32k x 2048 embedding and head.
    big = {"big_hidden": 2048, "big_layers": 16, "big_vocab": 32000}
    return {"hidden": 512, "layers": 4, "vocab": 1024, "seq": 128, "steps": 30, "reps": 10, "e2e_steps": 240, **big}


def llama(hidden: int, layers: int, vocab: int, device: str, dtype: torch.dtype = torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3 // 64 * 64 or 64,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 256),
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(device=device, dtype=dtype)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# --- 0. inventory -----------------------------------------------------------------------------------------


def inventory(device: str, sizes: dict) -> dict:
    found = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": device}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        found.update(gpu=props.name, memory_gib=round(props.total_memory / 2**30, 1))
        found["bf16"] = torch.cuda.is_bf16_supported()
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60)
        print(smi.stdout[-3000:])
    for package in ("triton", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes", "flash-attn"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    found["deepspeed"] = importlib.util.find_spec("deepspeed") is not None
    found["c_compiler"] = next((shutil.which(cc) for cc in (os.environ.get("CC", ""), "cc", "gcc") if cc), None)
    for key, value in found.items():
        print(f"  {key}: {value}")
    return found


# --- 1 and 2. CAME's compiled step ------------------------------------------------------------------------


def _came_params(sizes: dict, device: str) -> list[torch.nn.Parameter]:
    """A small Llama's parameters in bf16 (as `mixed_precision: auto` loads a full fine-tune on CUDA)."""
    model = llama(sizes["hidden"], sizes["layers"], sizes["vocab"], device, torch.bfloat16)
    return [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()]


def _set_grads(params: list, step: int) -> None:
    gen = torch.Generator(device=params[0].device).manual_seed(step)
    for p in params:
        p.grad = (torch.randn(p.shape, generator=gen, device=p.device) * 1e-3).to(p.dtype)


STEPS = 6


def _train(opt, params: list, device: str, wait: bool) -> tuple[float, float]:
    """``STEPS`` steps on seeded gradients (``wait``: for the warm-up thread after the first); the first
    step's seconds and all of them."""
    start = time.perf_counter()
    for step in range(1, STEPS + 1):
        _set_grads(params, step)
        opt.step()
        if step == 1:
            sync(device)
            first = time.perf_counter() - start
        if wait and step == 1:
            warm_up_done()
    sync(device)
    return first, time.perf_counter() - start


def _step_ms(opt, params: list, device: str, reps: int) -> float:
    """The median time of ``opt``'s step, in ms."""
    _set_grads(params, 0)
    return _median_ms(opt.step, device, reps)


def _apart(params: list, reference: list) -> float:
    return max(
        ((p.float() - q.float()).norm() / q.float().norm()).item() for p, q in zip(params, reference, strict=True)
    )


def compiled_step(device: str, sizes: dict) -> dict:
    """Part 1 (and 2): CAME8Bit's compiled step, compile null and true, against the eager step."""
    if device == "cpu":
        came_compile.CPU_MIN_NUMEL = 0
    params = _came_params(sizes, device)
    eager = CAME8Bit(params, lr=1e-4, compile=False)
    first, seconds = _train(eager, params, device, False)
    result = {"eager": {"first_s": round(first, 2), "seconds": round(seconds, 1)}}
    reference = [p.detach().clone() for p in params]  # after the same steps as each compiled run
    result["eager"]["step_ms"] = _step_ms(eager, params, device, sizes["reps"])
    for mode in (None, True):
        # Compiles afresh, as a first run does: no graph of the process's, none saved in the inductor cache.
        torch.compiler.reset()
        came_compile.GRAPHS.clear()
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpu-checks-inductor-")
        params = _came_params(sizes, device)
        opt = CAME8Bit(params, lr=1e-4, compile=mode)
        first, seconds = _train(opt, params, device, mode is None)
        row = {"first_s": round(first, 2), "seconds": round(seconds, 1), "failure": opt.compile_choices}
        row["apart_from_eager"] = _apart(params, reference)
        if not row["failure"]:
            row["step_ms"] = _step_ms(opt, params, device, sizes["reps"])
        result["auto" if mode is None else "true"] = row
        _print_compiled(mode, row, result["eager"])
    return result


def _print_compiled(mode, row: dict, eager: dict) -> None:
    print(
        f"  compile {'null' if mode is None else 'true'}: first step {row['first_s']} s (eager's {eager['first_s']} "
        f"s), {row['seconds']} s for {STEPS} steps"
        + (f", compiling failed: {row['failure']}" if row["failure"] else "")
        + f"; largest relative difference from the eager step {row['apart_from_eager']:.1e}"
    )
    if "step_ms" in row:
        ratio = row["step_ms"] / eager["step_ms"]
        print(f"    a step: compiled {row['step_ms']:.2f} ms, eager {eager['step_ms']:.2f} ms ({ratio:.2f}x)")


# --- 3, 4, 5, 7. through the command line -----------------------------------------------------------------


def _base_model(folder: Path, hidden: int, layers: int) -> str:
    """A random Llama with the test tokenizer (320 tokens), saved to ``folder``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(ROOT / "tests/assets/tiny-llama")
    llama(hidden, layers, len(tokenizer), "cpu").save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def _autotrain(config: dict, folder: Path, env: dict | None = None) -> dict:
    """``autotrain llm`` on ``config``: exit status, seconds, losses, run.json."""
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    run = Path(config["project_name"])
    state = run / "trainer_state.json"
    history = json.loads(state.read_text())["log_history"] if state.exists() else []
    record = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
    found = {
        "exit": done.returncode,
        "seconds": round(time.perf_counter() - start, 1),
        "losses": [round(e["loss"], 4) for e in history if "loss" in e],
        "dtypes": record.get("plan", {}).get("dtypes"),
        "optimizer_compile": record.get("optimizer_compile"),
        "memory": record.get("memory"),
    }
    if done.returncode != 0:
        found["output"] = (done.stdout[-1500:] + done.stderr[-2500:]).strip()
    return found


def _print_run(label: str, found: dict) -> None:
    losses = found["losses"]
    trend = f"loss {losses[0]} -> {losses[-1]} ({len(losses)} logged)" if losses else "no losses logged"
    ok = found["exit"] == 0 and losses and all(math.isfinite(x) for x in losses)
    print(f"  {label}: exit {found['exit']}, {found['seconds']} s, {trend}: {'ok' if ok else 'FAILED'}")
    for key in ("dtypes", "optimizer_compile"):
        if found.get(key):
            print(f"    {key}: {found[key]}")
    if found.get("output"):
        print("    " + found["output"].replace("\n", "\n    "))


def came_end_to_end(device: str, sizes: dict) -> dict:
    """Part 3: `autotrain llm` with came_8bit+fused_adam, mixed_precision auto, 240 steps."""
    with tempfile.TemporaryDirectory(prefix="autotrain-e2e-") as name:
        tmp = Path(name)
        hidden, layers = (sizes["hidden"], sizes["layers"])
        config = {
            "task": "llm", "trainer": "sft", "base_model": _base_model(tmp / "base", hidden, layers),
            "project_name": str(tmp / "run"), "log": "none",
            "data": {"path": str(ROOT / "tests/assets/data/text.jsonl"), "column_mapping": {"text": "text"}},
            "training_args": {
                "optimizer": "came_8bit+fused_adam", "mixed_precision": "auto", "max_steps": sizes["e2e_steps"],
                "batch_size": 8, "lr": 2e-4, "max_length": 128, "logging_steps": max(1, sizes["e2e_steps"] // 12),
                "save_steps": 10**6,
                "warmup_ratio": 0.05,
            },
        }  # fmt: skip
        found = _autotrain(config, tmp)
    _print_run("came_8bit+fused_adam, mixed_precision auto", found)
    return found


def qlora(device: str, sizes: dict) -> dict:
    """Part 4: QLoRA through the CLI, where bitsandbytes is installed (it needs CUDA)."""
    if importlib.util.find_spec("bitsandbytes") is None or device != "cuda":
        print("  skipped: bitsandbytes is not installed, or no CUDA (pip install bitsandbytes)")
        return {"skipped": True}
    with tempfile.TemporaryDirectory(prefix="autotrain-qlora-") as name:
        tmp = Path(name)
        config = {
            "task": "llm", "trainer": "sft", "base_model": _base_model(tmp / "base", sizes["hidden"], 2),
            "project_name": str(tmp / "run"), "log": "none",
            "data": {"path": str(ROOT / "tests/assets/data/chat.jsonl"), "column_mapping": {"messages": "messages"}},
            "peft": {"enabled": True, "r": 8, "alpha": 16, "quantization": "int4", "target_modules": "all-linear"},
            "training_args": {"max_steps": 5, "batch_size": 4, "lr": 2e-4, "max_length": 128, "logging_steps": 1},
        }  # fmt: skip
        found = _autotrain(config, tmp)
    _print_run("QLoRA", found)
    return found


def reward_lora_fp16(device: str, sizes: dict) -> dict:
    """Part 5: a reward model with LoRA in fp16 (fp16 needs CUDA: the smoke runs fp32)."""
    with tempfile.TemporaryDirectory(prefix="autotrain-reward-") as name:
        tmp = Path(name)
        config = {
            "task": "llm", "trainer": "reward", "base_model": _base_model(tmp / "base", sizes["hidden"], 2),
            "project_name": str(tmp / "run"), "log": "none",
            "data": {
                "path": str(ROOT / "tests/assets/data/preferences.jsonl"),
                "column_mapping": {"prompt": "question", "chosen": "good", "rejected": "bad"},
            },
            "peft": {"enabled": True, "r": 8, "alpha": 16},
            "training_args": {
                "max_steps": 10, "batch_size": 4, "lr": 1e-4, "max_length": 64, "logging_steps": 1,
                "mixed_precision": "fp16" if device == "cuda" else "no",
            },
        }  # fmt: skip
        found = _autotrain(config, tmp)
    _print_run("reward + LoRA, fp16", found)
    return found


MEMORY_BOUNDS = (0.95, 1.10)  # estimate / measured: never more than 5% low, at most 10% high


def memory_estimates(device: str, sizes: dict) -> dict:
    """Part 7: the memory estimate against the measured peak (CUDA: max_memory_allocated; the CPU smoke: the
    process's peak resident memory), 2 steps each through `autotrain llm`; then `batch_size: auto` under a
    budget: the chosen batch measured within it, and the next larger one measured too."""
    precision = "bf16" if device == "cuda" else "no"
    cases = {
        "bf16 full adamw": ({"enabled": False}, {}),
        "bf16 full adamw ckpt": ({"enabled": False}, {"gradient_checkpointing": True}),
        "bf16 full came8bit": ({"enabled": False}, {"optimizer": "came_8bit"}),
        "bf16 lora adamw": ({"enabled": True}, {}),
        "bf16 full adamw accum 2": ({"enabled": False}, {"batch_size": 2, "gradient_accumulation": 2}),
    }
    if device == "cuda" and importlib.util.find_spec("bitsandbytes") is not None:
        cases["qlora int4"] = ({"enabled": True, "quantization": "int4"}, {})
    found = {}
    with tempfile.TemporaryDirectory(prefix="autotrain-memory-") as name:
        tmp = Path(name)
        hidden, layers = (1024, 8) if device == "cuda" else (sizes["hidden"], sizes["layers"])
        base = _base_model(tmp / "base", hidden, layers)
        text = " ".join(["the quick brown fox jumps over the lazy dog"] * 120)
        (tmp / "data.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for _ in range(32)))

        def measure(label: str, peft: dict, training: dict) -> dict:
            run = tmp / label.replace(" ", "-").replace(",", "")
            run.mkdir()
            args = {"batch_size": 4, "max_length": 512, "max_steps": 2, "save_steps": 1000, "padding_free": False}
            config = {
                "task": "llm", "trainer": "sft", "base_model": base, "project_name": str(run / "out"), "log": "none",
                "data": {"path": str(tmp / "data.jsonl"), "chat_template": "none"},
                "peft": peft, "training_args": {**args, "mixed_precision": precision, **training},
            }  # fmt: skip
            memory = _autotrain(config, run).get("memory") or {}
            return _memory_row(label, memory)

        for label, (peft, training) in cases.items():
            found[label] = measure(label, peft, training)
        found.update(_auto_batch(found["bf16 full adamw"], measure))
    return found


def _memory_row(label: str, memory: dict) -> dict:
    measured = memory.get("measured") or {}
    value = measured.get("max_memory_allocated", measured.get("peak_rss"))
    ratio = memory.get("estimate_over_measured")
    row = {"estimate": memory.get("bytes_per_device"), "measured": value, "ratio": ratio, "parts": memory.get("parts")}
    row["batch"] = (memory.get("batch_size_auto") or {}).get("batch_size")
    low, high = MEMORY_BOUNDS
    verdict = "no figure" if ratio is None else ("ok" if low <= ratio <= high else f"OUTSIDE {low}..{high}")
    print(f"  {label}: estimate {row['estimate']} measured {value} estimate/measured {ratio}: {verdict}")
    return row


def _auto_batch(reference: dict, measure) -> dict:
    """`batch_size: auto` (target 16) under a budget of 1.5 times the peak of batch 4: the batch it chooses
    runs within the budget; the next larger one, trained as a fixed batch, is measured beside it."""
    if not reference.get("measured"):
        return {}
    budget = int(reference["measured"] * 1.5)
    chosen = measure("auto under budget", {"enabled": False}, {
        "batch_size": "auto", "target_batch_size": 16, "memory_budget": budget,
    })  # fmt: skip
    rows = {"auto under budget": {**chosen, "budget": budget}}
    if chosen.get("batch") and chosen["batch"] < 16:
        larger = next(batch for batch in (2, 4, 8, 16) if batch > chosen["batch"] and 16 % batch == 0)
        fixed = {"batch_size": larger, "gradient_accumulation": 16 // larger}
        rows["next larger batch"] = {**measure("next larger batch", {"enabled": False}, fixed), "batch": larger}
        rows["next larger batch"]["budget"] = budget
    for label, row in rows.items():
        if row.get("measured"):
            side = "within" if row["measured"] <= budget else "over"
            print(f"  {label} (batch {row.get('batch')}): measured {row['measured']} {side} the budget {budget}")
    return rows


# --- 6. performance ---------------------------------------------------------------------------------------


def _median_ms(step, device: str, reps: int) -> float:
    times = []
    for _ in range(reps + 1):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) * 1e3


def _captured(opt, device: str):
    """``opt.step`` captured in a CUDA graph after warm-up steps on a side stream; its replay (the CPU: the
    plain step)."""
    if device != "cuda":
        opt.step()
        return opt.step
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # state, groups, graphs and hyper-parameter tensors all made before capture
            opt.step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step()
    return graph.replay


def _kernels(step, device: str) -> int:
    """Kernels one step launches (CUDA), or on the CPU the launch-like operations (benchmarks/came_ops.py)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        step()
        sync(device)
    if device == "cuda":
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    from came_ops import count_ops

    return count_ops([e for e in prof.events() if e.cpu_parent is None])[0]


def _state_bytes(opt) -> int:
    return sum(t.nbytes for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor))


def performance(device: str, sizes: dict) -> dict:
    """Part 6: optimizer steps on a 0.83B Llama (the smoke: a tiny one), ratios measured in this run."""
    shape = (sizes.get("big_hidden", sizes["hidden"]), sizes.get("big_layers", 2), sizes.get("big_vocab", 256))
    params = list(llama(*shape, device).parameters())
    count = sum(p.numel() for p in params)
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    makers = {
        "came_8bit compiled": lambda: CAME8Bit(params, lr=1e-4, compile=True),
        "came_8bit compiled, captured": lambda: CAME8Bit(params, lr=1e-4, compile=True, capturable=True),
        "came fp32 compiled": lambda: CAME(params, lr=1e-4, compile=True),
        "adamw fused": lambda: torch.optim.AdamW(params, lr=1e-4, fused=device == "cuda"),
    }
    if device == "cuda" and importlib.util.find_spec("bitsandbytes") is not None:
        import bitsandbytes

        makers["bnb AdamW8bit"] = lambda: bitsandbytes.optim.AdamW8bit(params, lr=1e-4)
    rows = {}
    for name, make in makers.items():
        try:
            rows[name] = _one_optimizer(name, make, params, device, sizes["reps"])
        except Exception as exc:  # one candidate failing must not hide the others
            print(f"  {name}: FAILED: {type(exc).__name__}: {str(exc)[:300]}")
        if device == "cuda":
            torch.cuda.empty_cache()
    for ours in [n for n in rows if n.startswith("came_8bit")]:
        for other in ("bnb AdamW8bit", "adamw fused", "came fp32 compiled"):
            if other in rows:
                print(f"  {ours} / {other}: {rows[ours]['ms'] / rows[other]['ms']:.2f}x the step time")
    return {"params": count, "rows": rows}


def _one_optimizer(name: str, make, params: list, device: str, reps: int) -> dict:
    count = sum(p.numel() for p in params)
    before = torch.cuda.memory_allocated() if device == "cuda" else 0
    opt = make()
    step = _captured(opt, device) if "captured" in name else opt.step
    step()
    state = (torch.cuda.memory_allocated() - before) if device == "cuda" else _state_bytes(opt)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if device == "cuda" else 0
    ms = _median_ms(step, device, reps)
    peak = (torch.cuda.max_memory_allocated() - base) if device == "cuda" else 0
    kernels = _kernels(step, device)
    groups = len({(tuple(p.shape), p.dtype) for p in params}) if "came" in name else 0  # same-shaped params
    row = {"ms": round(ms, 3), "state_bytes_per_param": round(state / count, 3), "peak_extra_mib": peak / 2**20}
    row.update(kernels=kernels, groups=groups)
    per_group = f" ({kernels / groups:.1f} per group of {groups})" if groups else ""
    extra = f", peak extra in a step {peak / 2**20:.0f} MiB" if device == "cuda" else ""
    print(f"  {name}: {ms:.2f} ms, state {state / count:.2f} B/param, {kernels} kernels{per_group}{extra}")
    return row


# --- 8, 9. batches and precisions -------------------------------------------------------------------------


def padding_free_batches(device: str, sizes: dict) -> dict:
    """Part 8: one batch of mixed lengths, padded vs packed into rows (sdpa, fp32: the same loss and gradients to
    rounding) and, with flash-attn on CUDA, padded vs one sequence (flash_attention_2, bf16)."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from autotrain.training.batching import RowPackingCollator

    gen = torch.Generator().manual_seed(0)
    lengths = [int(16 * (sizes["seq"] * 4 / 16) ** torch.rand((), generator=gen).item()) for _ in range(8)]
    examples = [{"input_ids": torch.randint(3, sizes["vocab"], (n,), generator=gen).tolist()} for n in lengths]
    padded = DataCollatorForLanguageModeling(pad_token_id=0)
    batches = {"padded": padded(examples), "rows": RowPackingCollator(padded)(examples)}
    flat = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(examples)
    batches["one sequence"] = {k: flat[k] for k in ("input_ids", "labels", "position_ids")}
    found = {}
    cases = [("sdpa", torch.float32, "padded"), ("sdpa", torch.float32, "rows")]
    if device == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        cases += [
            ("flash_attention_2", torch.bfloat16, "padded"),
            ("flash_attention_2", torch.bfloat16, "one sequence"),
        ]
    for attn, dtype, name in cases:
        model = llama(sizes["hidden"], sizes["layers"], sizes["vocab"], device, dtype).train()
        model.config._attn_implementation = attn
        batch = {k: v.to(device) for k, v in batches[name].items() if k != "attention_mask" or name == "padded"}
        loss = model(**batch, use_cache=False).loss
        loss.backward()
        grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        base = found.get(f"{attn} padded")
        gap = None if base is None else ((grads - base[1]).norm() / base[1].norm()).item()
        found[f"{attn} {name}"] = (loss.item(), grads)
        print(f"  {attn} {name}: loss {loss.item():.6f}" + ("" if gap is None else f", gradient rel diff {gap:.1e}"))
    return {key: round(loss, 6) for key, (loss, _) in found.items()} | {"lengths": lengths}


def precision_runs(device: str, sizes: dict) -> dict:
    """Part 9: each bundled optimizer under bf16 / fp16 autocast and with bf16 weights."""
    bundled = {"came": CAME, "came_8bit": CAME8Bit, "fused_adam": FusedAdam, "came_8bit+fused_adam": CAME8BitFusedAdam}
    modes = ("bf16-autocast", "fp16-autocast", "bf16-params") if device == "cuda" else ("bf16-autocast", "bf16-params")
    found = {}
    for mode in modes:
        for name, cls in bundled.items():
            try:
                first, last = _train_steps(device, sizes, mode, cls)
                ok = math.isfinite(first) and math.isfinite(last) and last < first
                found[f"{mode} {name}"] = (round(first, 3), round(last, 3), ok)
                print(f"  {mode:14s} {name:22s} loss {first:.3f} -> {last:.3f}  {'ok' if ok else 'CHECK'}")
            except Exception as exc:  # one failing combination must not hide the others
                print(f"  {mode:14s} {name:22s} FAILED: {type(exc).__name__}: {exc}")
    return found


def _train_steps(device: str, sizes: dict, mode: str, cls) -> tuple[float, float]:
    dtype = torch.bfloat16 if mode == "bf16-params" else torch.float32
    model = llama(sizes["hidden"], sizes["layers"], sizes["vocab"], device, dtype)
    opt = cls(model.parameters(), lr=1e-3)
    autocast = {"bf16-autocast": torch.bfloat16, "fp16-autocast": torch.float16}.get(mode)
    scaler = torch.amp.GradScaler(device) if mode == "fp16-autocast" else None
    data = torch.randint(0, sizes["vocab"] // 4, (8, sizes["seq"]), generator=torch.Generator().manual_seed(0))
    data = data.to(device)
    losses = []
    for _ in range(sizes["steps"]):
        with torch.autocast(device, dtype=autocast, enabled=autocast is not None):
            loss = model(input_ids=data, labels=data).loss
        opt.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        losses.append(loss.item())
    return losses[0], losses[-1]


# --- 10. the loss step ---------------------------------------------------------------------------------------


def loss_step(device: str, sizes: dict) -> dict:
    """Part 10: each `cross_entropy` on one bf16 head and batch; the memory, the time and the error of each."""
    from autotrain.training.chunked_loss import extra_peak_bytes

    tokens, vocab, hidden = (256, 4096, 64) if device == "cpu" else (4096, 128_256, 4096)
    gen = torch.Generator().manual_seed(0)
    states = torch.randn(tokens, hidden, generator=gen).to(device, torch.bfloat16)
    weight = (0.02 * torch.randn(vocab, hidden, generator=gen)).to(device, torch.bfloat16)
    targets = torch.randint(0, vocab, (tokens,), generator=gen).to(device)
    methods = ["full", "chunked"] + [
        m
        for m, mod in (("liger", "liger_kernel"), ("cut_cross_entropy", "cut_cross_entropy"))
        if device == "cuda" and importlib.util.find_spec(mod)
    ]
    found = {"logits_fp32_bytes": tokens * vocab * 4}
    for trained in (False, True):
        exact = _loss_and_grads("exact", states, weight, targets, trained)
        for method in methods:
            row = _one_loss(method, states, weight, targets, trained, exact, device)
            row["estimate"] = extra_peak_bytes(tokens, vocab, hidden, 2, trained) if method == "chunked" else None
            found[f"{method} head {'trained' if trained else 'frozen'}"] = row
            extra = row["extra_bytes"]
            share = (
                "" if extra is None else f", extra {extra / 2**20:.0f} MiB ({extra / found['logits_fp32_bytes']:.1%})"
            )
            print(
                f"  {method:18s} head {'trained' if trained else 'frozen '}: {row['ms']:.2f} ms{share}, loss rel "
                f"{row['loss_rel']:.1e}, grads rel {row['grads_rel']:.1e}"
            )
    return found


def _loss_and_grads(method: str, states, weight, targets, trained: bool):
    from autotrain.training.lm_loss import summed_cross_entropy

    hidden = (states.float() if method == "exact" else states).detach().requires_grad_()
    head = (weight.float() if method == "exact" else weight).detach().requires_grad_(trained)
    if method in ("full", "exact"):
        logits = hidden @ head.t()
        loss = torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum")
    else:
        loss = summed_cross_entropy(hidden, head, None, targets, method)[0]
    loss.backward()
    return loss.detach().float(), [t.grad for t in (hidden, head) if t.grad is not None]  # as they are left


def _one_loss(method: str, states, weight, targets, trained: bool, exact, device: str) -> dict:
    _loss_and_grads(method, states, weight, targets, trained)  # warm-up: kernels built, caches filled
    extra = None
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        loss, grads = _loss_and_grads(method, states, weight, targets, trained)
        extra = torch.cuda.max_memory_allocated() - before - sum(g.numel() * g.element_size() for g in grads)
    else:
        loss, grads = _loss_and_grads(method, states, weight, targets, trained)
    ms = _median_ms(lambda: _loss_and_grads(method, states, weight, targets, trained), device, 5)
    rel = [float((a.float() - b.float()).norm() / b.float().norm()) for a, b in zip(grads, exact[1], strict=True)]
    return {
        "ms": ms,
        "extra_bytes": extra,
        "loss_rel": float((loss - exact[0]).abs() / exact[0]),
        "grads_rel": max(rel),
    }


# --- running the parts ------------------------------------------------------------------------------------

FUNCTIONS = {
    0: inventory,
    1: compiled_step,
    2: compiled_step,
    3: came_end_to_end,
    4: qlora,
    5: reward_lora_fp16,
    6: performance,
    7: memory_estimates,
    8: padding_free_batches,
    9: precision_runs,
    10: loss_step,
}


def run_part(part: int, device: str, out: Path) -> int:
    """One part, in this (child) process: its figures to ``out``/part-N.json; 1 if it raised."""
    torch.manual_seed(0)
    try:
        found = FUNCTIONS[part](device, sizes_for(device == "cpu"))
        code = 0
    except Exception:
        traceback.print_exc()
        found, code = {"error": traceback.format_exc(limit=3)}, 1
    (out / f"part-{part}.json").write_text(json.dumps(found, indent=1, default=str))
    return code


def _child_env(part: int, scratch: Path) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if part == 2:  # no C compiler, nothing cached: what a Docker image without build tools meets
        env.update(NO_COMPILER, TRITON_CACHE_DIR=str(scratch / "triton"), TORCHINDUCTOR_CACHE_DIR=str(scratch / "ind"))
    return env


def run_all(parts: list[int], smoke: bool, out: Path, budget_s: float) -> int:
    """Each part in a child process, in order, within ``budget_s``; a summary at the end."""
    deadline = time.monotonic() + budget_s
    summary = []
    for part in parts:
        what, estimate = PARTS[part]
        left = deadline - time.monotonic()
        if not smoke and estimate > left:
            summary.append((part, "skipped", f"estimate {estimate} s, {left:.0f} s left"))
            continue
        print(f"\n== {part}. {what}", flush=True)
        args = [sys.executable, __file__, "--part", str(part), "--out", str(out)] + (["--cpu-smoke"] if smoke else [])
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="gpu-checks-") as scratch:
            try:
                code = subprocess.run(
                    args, env=_child_env(part, Path(scratch)), timeout=min(PART_LIMIT_S, left)
                ).returncode
            except subprocess.TimeoutExpired:
                code = "timed out"
        summary.append((part, code, f"{time.monotonic() - start:.0f} s"))
    print("\n== summary (part, exit, time): " + "; ".join(f"{p}: {c}, {t}" for p, c, t in summary))
    print(f"figures: {out}")
    return 0 if all(code in (0, "skipped") for _, code, _ in summary) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU: the code paths only")
    parser.add_argument("--parts", default=",".join(map(str, PARTS)), help="which parts, in this order")
    parser.add_argument("--budget-s", type=float, default=840.0, help="seconds for the whole run (default 840)")
    parser.add_argument("--out", type=Path, default=None, help="folder for part-N.json (default: a temporary one)")
    parser.add_argument("--part", type=int, default=None, help=argparse.SUPPRESS)  # a child: run this part
    args = parser.parse_args()
    if not torch.cuda.is_available() and not args.cpu_smoke:
        print("gpu_checks: no CUDA device here; nothing to check (run it on a GPU machine, or --cpu-smoke)")
        return 0
    device = "cpu" if args.cpu_smoke else "cuda"
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu-checks-"))
    out.mkdir(parents=True, exist_ok=True)
    if args.part is not None:
        return run_part(args.part, device, out)
    parts = [int(n) for n in args.parts.split(",")]
    print(f"device {torch.cuda.get_device_name() if device == 'cuda' else 'cpu (smoke)'}, torch {torch.__version__}")
    return run_all(parts, args.cpu_smoke, out, args.budget_s)


if __name__ == "__main__":
    sys.exit(main())
