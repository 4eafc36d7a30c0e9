"""Checks that need a CUDA GPU, in one script that runs in well under 10 minutes on one recent GPU.

    python benchmarks/gpu_checks.py [--budget-s 540] [--params 1.0]
    python benchmarks/gpu_checks.py --cpu-smoke    # the same code paths, tiny sizes, on the CPU

1. Mixed precision with every bundled optimizer: a small Llama (built from a LlamaConfig, no download)
   trained 30 steps under bf16 and fp16 autocast (fp16 with a GradScaler), and with bf16 parameters: loss
   first/last, all finite, ms/step.
2. CAME8Bit against bitsandbytes' 8-bit AdamW on a ~1B-parameter Llama (random weights, random gradients):
   step time (median of 10, after warm-up) and optimizer-state memory (allocated after the first step,
   minus before), and the peak extra memory of a step. Also fp32 AdamW as the baseline both save on.
3. CAME8Bit's compiled step (Triton) against its eager step on the same model: step time, compile time,
   and how far the parameters are apart after 5 steps; then what `compile: null` measured and kept per
   group of same-shaped params.
4. QLoRA through `autotrain llm` (4-bit base, LoRA, 5 steps) if bitsandbytes is installed.
5. SFT's padding-free batches on CUDA: one batch of 8 samples of mixed length on a small Llama, padded
   (sdpa) against packed into rows (sdpa, autotrain's default) and, with flash-attn installed, flattened
   into one sequence (flash_attention_2, bf16): loss, gradient difference and ms per forward + backward.
6. CAME8Bit's grouped step captured in a CUDA graph (``capturable=True``, eager and compiled) against
   bitsandbytes' AdamW8bit, fused AdamW and fp32 CAME on check 2's model: ms per step, ratios measured in
   the same run, and kernels launched per step per group of same-shaped params (target: <= 25).
7. The memory estimate (run.json) against torch.cuda.max_memory_allocated for bf16, bf16 with gradient
   checkpointing and QLoRA: 2 steps each through `autotrain llm` on a random Llama (target +-15%).

Each check prints its own lines as it finishes; a check that fails prints the error and the others still
run. Without CUDA (and without --cpu-smoke) the script says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from autotrain.optimizers import CAME, CAME8Bit, CAME8BitFusedAdam, FusedAdam, came_compile, came_policy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = {
    "came": lambda params: CAME(params, lr=1e-3),
    "came_8bit": lambda params: CAME8Bit(params, lr=1e-3),
    "fused_adam": lambda params: FusedAdam(params, lr=1e-3),
    "came_8bit+fused_adam": lambda params: CAME8BitFusedAdam(params, lr=1e-3),
}


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


def precision_runs(device: str, sizes: dict) -> None:
    """Check 1: each bundled optimizer under bf16 / fp16 autocast and with bf16 parameters."""
    print("\n== 1. mixed precision x bundled optimizers (30 steps, small Llama)")
    for mode in ("bf16-autocast", "fp16-autocast", "bf16-params"):
        for name, make in BUNDLED.items():
            try:
                first, last, ms = _train_steps(device, sizes, mode, make, steps=sizes["steps"])
                verdict = "ok" if math.isfinite(first) and math.isfinite(last) and last < first else "CHECK"
                print(f"  {mode:14s} {name:22s} loss {first:.3f} -> {last:.3f}  {ms:7.1f} ms/step  {verdict}")
            except Exception as exc:  # one failing combination must not hide the others
                print(f"  {mode:14s} {name:22s} FAILED: {type(exc).__name__}: {exc}")


def _train_steps(device: str, sizes: dict, mode: str, make, steps: int) -> tuple[float, float, float]:
    dtype = torch.bfloat16 if mode == "bf16-params" else torch.float32
    model = llama(sizes["hidden"], sizes["layers"], sizes["vocab"], device, dtype)
    opt = make(model.parameters())
    autocast = {"bf16-autocast": torch.bfloat16, "fp16-autocast": torch.float16}.get(mode)
    scaler = torch.amp.GradScaler(device) if mode == "fp16-autocast" else None
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(0, sizes["vocab"] // 4, (8, sizes["seq"]), generator=gen).to(device)  # learnable
    losses, times = [], []
    for _ in range(steps):
        sync(device)
        start = time.perf_counter()
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
        sync(device)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return losses[0], losses[-1], statistics.median(times[3:]) * 1e3


def _step_figures(name: str, make, params: list, device: str, reps: int) -> dict:
    """Optimizer-state bytes, peak extra bytes of a step, median step time (random gradients)."""
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    before = torch.cuda.memory_allocated() if device == "cuda" else 0
    opt = make(params)
    start = time.perf_counter()
    opt.step()  # creates the state (and compiles, for a compiled step)
    sync(device)
    first = time.perf_counter() - start
    state = (torch.cuda.memory_allocated() - before) if device == "cuda" else _state_bytes(opt)
    opt.step()
    sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    times = []
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        opt.step()
        sync(device)
        times.append(time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() - base) if device == "cuda" else 0
    del opt
    return {"name": name, "state": state, "peak": peak, "ms": statistics.median(times) * 1e3, "first_s": first}


def _state_bytes(opt) -> int:
    return sum(t.nbytes for s in opt.state.values() for t in s.values() if isinstance(t, torch.Tensor))


def eight_bit_against_bnb(device: str, sizes: dict) -> None:
    """Check 2: CAME8Bit vs bitsandbytes AdamW8bit (and fp32 AdamW) on a ~1B-parameter Llama."""
    model = llama(sizes["big_hidden"], sizes["big_layers"], sizes["big_vocab"], device)
    params = [p for p in model.parameters()]
    count = sum(p.numel() for p in params)
    print(f"\n== 2. optimizer step on a {count / 1e9:.2f}B-parameter Llama (random gradients)")
    candidates = {
        "came_8bit (compiled)": lambda ps: CAME8Bit(ps, lr=1e-4, compile=True),
        "came_8bit (eager)": lambda ps: CAME8Bit(ps, lr=1e-4, compile=False),
        "came fp32 (compiled)": lambda ps: CAME(ps, lr=1e-4, compile=True),
        "adamw foreach (fp32 state)": lambda ps: torch.optim.AdamW(ps, lr=1e-4, foreach=True),
        "adamw fused (fp32 state)": lambda ps: torch.optim.AdamW(ps, lr=1e-4, fused=True),
    }
    try:
        import bitsandbytes

        candidates["bnb AdamW8bit"] = lambda ps: bitsandbytes.optim.AdamW8bit(ps, lr=1e-4)
    except ImportError:
        print("  bitsandbytes is not installed: no AdamW8bit figure (pip install bitsandbytes)")
    rows = []
    for name, make in candidates.items():
        try:
            rows.append(_step_figures(name, make, params, device, sizes["reps"]))
        except Exception as exc:
            print(f"  {name}: FAILED: {type(exc).__name__}: {exc}")
        torch.cuda.empty_cache() if device == "cuda" else None
    for row in rows:
        print(
            f"  {row['name']:26s} state {row['state'] / 2**30:6.2f} GiB ({row['state'] / count:5.2f} B/param)  "
            f"step {row['ms']:8.1f} ms  peak extra in step {row['peak'] / 2**20:8.1f} MiB  "
            f"first step {row['first_s']:.1f} s"
        )
    by_name = {r["name"]: r for r in rows}
    ours = by_name.get("came_8bit (compiled)")
    for other in ("bnb AdamW8bit", "came fp32 (compiled)", "adamw foreach (fp32 state)", "adamw fused (fp32 state)"):
        if ours and other in by_name:
            theirs = by_name[other]
            print(
                f"  CAME8Bit compiled / {other}: step {ours['ms'] / theirs['ms']:.2f}x, "
                f"state {ours['state'] / max(theirs['state'], 1):.2f}x"
            )
    if ours:
        _launch_bound(CAME8Bit(params, lr=1e-4, compile=True), device)
    del model, params


def _launch_bound(opt, device: str) -> None:
    """One profiled step: GPU kernel time against the step's wall time (a step far longer than its
    kernels is bound by the host launching them), and the number of kernels."""
    if device != "cuda":
        return
    from torch.profiler import ProfilerActivity, profile

    opt.step()
    sync(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        opt.step()
        sync(device)
        wall = time.perf_counter() - start
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(e.device_time for e in kernels) / 1e3
    print(
        f"  profiled CAME8Bit compiled step: wall {wall * 1e3:.1f} ms (with profiler), kernels {len(kernels)}, "
        f"GPU busy {busy:.1f} ms"
    )
    table = prof.key_averages().table(sort_by="device_time_total", row_limit=8)
    print("  " + table.replace("\n", "\n  "))


def compiled_against_eager(device: str, sizes: dict) -> None:
    """Check 3: CAME8Bit compiled (Triton) vs eager, same model, same gradients."""
    print("\n== 3. CAME8Bit compiled vs eager")
    models = [llama(sizes["big_hidden"], sizes["big_layers"], sizes["big_vocab"], device) for _ in range(2)]
    grads = [torch.randn_like(p) * 1e-3 for p in models[0].parameters()]
    opts = [CAME8Bit(m.parameters(), lr=1e-4, compile=c) for m, c in zip(models, (True, False), strict=True)]
    times: dict[int, list[float]] = {0: [], 1: []}
    seconds_before = came_compile.COMPILER.seconds
    for step in range(sizes["reps"] + 1):
        for i, (model, opt) in enumerate(zip(models, opts, strict=True)):
            for p, g in zip(model.parameters(), grads, strict=True):
                p.grad = g.clone()
            sync(device)
            start = time.perf_counter()
            opt.step()
            sync(device)
            if step > 0:
                times[i].append(time.perf_counter() - start)
    compiled, eager = (statistics.median(times[i]) * 1e3 for i in (0, 1))
    diff = max(
        ((a - b).norm() / b.norm()).item() for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True)
    )
    print(
        f"  step: compiled {compiled:.1f} ms, eager {eager:.1f} ms ({compiled / eager:.2f}x); "
        f"compile (new shapes) {came_compile.COMPILER.seconds - seconds_before:.1f} s; "
        f"max relative param difference after {sizes['reps'] + 1} steps {diff:.1e}"
        + (f"; compile failed: {came_compile.COMPILER.failure}" if came_compile.COMPILER.failure else "")
    )
    # compile: null on the same model: a worker compiles each group from fake tensors (a compiler of its own
    # here, so that it compiles afresh), then on CUDA each group times six steps, compiled and eager in
    # turn, and keeps the faster.
    compiler = came_compile.StepCompiler()
    came_policy.BACKGROUND = came_policy.Background(compiler)
    auto = CAME8Bit(models[1].parameters(), lr=1e-4)
    for step in range(12):
        for p, g in zip(models[1].parameters(), grads, strict=True):
            p.grad = g.clone()
        auto.step()
        if step == 0:
            came_policy.BACKGROUND.idle(timeout=300)
    sync(device)
    choices = auto.compile_choices
    kept = sum(c["kept"] == "compiled" for c in choices)
    print(
        f"  auto (compile: null): background compile {compiler.seconds:.1f} s"
        + (f" (failed: {compiler.failure})" if compiler.failure else "")
        + f"; compiled kept for {kept} of {len(choices)} measured groups"
        + "".join(
            f"; {'x'.join(map(str, c['shape']))} ({c['params']}): eager {c['eager_ms']:.2f} / compiled "
            f"{c['compiled_ms']:.2f} ms"
            for c in choices
        )
        + ("" if choices else " (auto measures on CUDA only)")
    )


QLORA_CONFIG = {
    "task": "llm",
    "trainer": "sft",
    "data": {"path": str(ROOT / "tests/assets/data/chat.jsonl"), "column_mapping": {"messages": "messages"}},
    "peft": {"enabled": True, "r": 8, "alpha": 16, "quantization": "int4", "target_modules": "all-linear"},
    "training_args": {"max_steps": 5, "batch_size": 4, "lr": 2e-4, "max_length": 128, "logging_steps": 1},
}


def qlora(device: str, sizes: dict) -> None:
    """Check 4: QLoRA (4-bit base + LoRA) through the CLI on a small random Llama."""
    print("\n== 4. QLoRA through `autotrain llm`")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        print("  bitsandbytes is not installed: skipped (pip install bitsandbytes)")
        return
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="autotrain-qlora-") as name:
        tmp = Path(name)
        llama(sizes["hidden"], sizes["layers"], 320, "cpu").save_pretrained(tmp / "base")
        AutoTokenizer.from_pretrained(ROOT / "tests/assets/tiny-llama").save_pretrained(tmp / "base")
        config = {**QLORA_CONFIG, "base_model": str(tmp / "base"), "project_name": str(tmp / "run")}
        (tmp / "qlora.json").write_text(json.dumps(config))
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(tmp / "qlora.json")],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        wall = time.perf_counter() - start
        state = tmp / "run" / "trainer_state.json"
        losses = (
            [e["loss"] for e in json.loads(state.read_text())["log_history"] if "loss" in e] if state.exists() else []
        )
        verdict = "ok" if done.returncode == 0 and losses else f"FAILED (exit {done.returncode})"
        print(f"  exit {done.returncode}, {wall:.0f} s, losses {[round(x, 3) for x in losses]}: {verdict}")
        if done.returncode != 0:
            print("  " + done.stdout[-2000:].replace("\n", "\n  ") + done.stderr[-2000:].replace("\n", "\n  "))


def padding_free_batches(device: str, sizes: dict) -> None:
    import importlib.util

    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from autotrain.training.batching import RowPackingCollator, keeps_packed_samples_apart

    print("\n== 5. SFT padding-free batches: padded vs rows (sdpa) vs one sequence (flash_attention_2)")
    gen = torch.Generator().manual_seed(0)
    top = sizes["seq"] * 4
    lengths = [int(16 * (top / 16) ** torch.rand((), generator=gen).item()) for _ in range(8)]
    examples = [{"input_ids": torch.randint(3, sizes["vocab"], (n,), generator=gen).tolist()} for n in lengths]
    padded_collator = DataCollatorForLanguageModeling(pad_token_id=0)
    batches = {"padded": padded_collator(examples), "rows": RowPackingCollator(padded_collator)(examples)}
    flat = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(examples)
    batches["one sequence"] = {k: flat[k] for k in ("input_ids", "labels", "position_ids")}

    def run(model, batch, reps=5):
        batch = {
            k: v.to(device) for k, v in batch.items() if k in ("input_ids", "labels", "position_ids", "attention_mask")
        }
        times = []
        for _ in range(reps):
            model.zero_grad(set_to_none=True)
            sync(device)
            t0 = time.perf_counter()
            loss = model(**batch, use_cache=False).loss
            loss.backward()
            sync(device)
            times.append(time.perf_counter() - t0)
        grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        return loss.item(), grads, statistics.median(times[1:]) * 1000

    model = llama(sizes["hidden"], sizes["layers"], sizes["vocab"], device).train()
    print(f"  lengths {lengths}; rows layout kept apart: {keeps_packed_samples_apart(model)}")
    base_loss, base_grads, base_ms = run(model, batches["padded"])
    for name in ("padded", "rows"):
        loss, grads, ms = run(model, batches[name])
        gap = ((grads - base_grads).norm() / base_grads.norm()).item()
        shape = tuple(batches[name]["input_ids"].shape)
        print(
            f"  sdpa fp32 {name:>12} {shape}: loss {loss:.6f} (padded {base_loss:.6f}), "
            f"grad rel diff {gap:.1e}, {ms:.1f} ms"
        )
    if device != "cuda" or importlib.util.find_spec("flash_attn") is None:
        print("  flash_attention_2: skipped (needs CUDA and the flash-attn package)")
        return
    for attn in ("sdpa", "flash_attention_2"):
        model = llama(sizes["hidden"], sizes["layers"], sizes["vocab"], device, torch.bfloat16).train()
        model.config._attn_implementation = attn
        for name in ("padded", "one sequence"):
            loss, _, ms = run(model, batches[name])
            print(f"  {attn} bf16 {name:>12}: loss {loss:.4f}, {ms:.1f} ms")


def captured_came_step(device: str, sizes: dict) -> None:
    """Check 6: CAME8Bit's grouped step captured in a CUDA graph against bitsandbytes AdamW8bit, fused AdamW
    and fp32 CAME (all in this run), and the kernels one step launches per group of same-shaped params."""
    model = llama(sizes["big_hidden"], sizes["big_layers"], sizes["big_vocab"], device)
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    print(f"\n== 6. CAME8Bit step, CUDA-graph captured, on a {sum(p.numel() for p in params) / 1e9:.2f}B Llama")
    makers = {
        "came_8bit eager, captured": lambda: CAME8Bit(params, lr=1e-4, compile=False, capturable=True),
        "came_8bit compiled, captured": lambda: CAME8Bit(params, lr=1e-4, compile=True, capturable=True),
        "came fp32 compiled, captured": lambda: CAME(params, lr=1e-4, compile=True, capturable=True),
        "adamw fused": lambda: torch.optim.AdamW(params, lr=1e-4, fused=True),
    }
    try:
        import bitsandbytes

        makers["bnb AdamW8bit"] = lambda: bitsandbytes.optim.AdamW8bit(params, lr=1e-4)
    except ImportError:
        print("  bitsandbytes is not installed: no AdamW8bit figure")
    ms = {}
    for name, make in makers.items():
        try:
            opt = make()
            step = _captured(opt, device) if "captured" in name else opt.step
            ms[name] = _median_ms(step, device, sizes["reps"])
            if "came" in name:
                groups = sum(len(g[1]) for g in opt._groups.values())
                kernels = _kernels(step, device)
                print(f"  {name}: {ms[name]:.1f} ms, {groups} groups, {kernels} kernels ({kernels / groups:.1f}/group)")
            del opt
        except Exception as exc:
            print(f"  {name}: FAILED: {type(exc).__name__}: {str(exc)[:300]}")
    for ours in [n for n in ms if n.startswith("came_8bit")]:
        for other in ("bnb AdamW8bit", "adamw fused", "came fp32 compiled, captured"):
            if other in ms:
                print(f"  {ours} / {other}: {ms[ours] / ms[other]:.2f}x (target vs bnb: <= 1.0x)")


def _captured(opt, device: str):
    """``opt.step`` captured in a CUDA graph after warm-up steps on a side stream; its replay. On the CPU
    (smoke): the plain step."""
    if device != "cuda":
        opt.step()
        return opt.step
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # state, groups, compiled graphs, hyper-parameter tensors: all made before capture
            opt.step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step()
    return graph.replay


def _median_ms(step, device: str, reps: int) -> float:
    times = []
    for _ in range(reps + 1):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) * 1e3


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


def memory_estimates(device: str, sizes: dict) -> None:
    """Check 7: the memory estimate (run.json) against torch.cuda.max_memory_allocated for bf16, bf16 with
    gradient checkpointing and QLoRA, 2 steps each through `autotrain llm` on a random Llama (target +-15%)."""
    print("\n== 7. memory estimate against the measured peak")
    from transformers import AutoTokenizer

    cases = {
        "bf16 full": {"training_args": {"mixed_precision": "bf16" if device == "cuda" else "no"}},
        "bf16 full ckpt": {"training_args": {"mixed_precision": "bf16" if device == "cuda" else "no",
                                             "gradient_checkpointing": True}},
        "qlora int4": {"peft": {"enabled": True, "quantization": "int4"},
                       "training_args": {"mixed_precision": "bf16", "gradient_checkpointing": True}},
    }  # fmt: skip
    if device != "cuda":
        cases.pop("qlora int4")  # bitsandbytes needs CUDA
    with tempfile.TemporaryDirectory(prefix="autotrain-memory-") as name:
        tmp = Path(name)
        hidden, layers = (1024, 8) if device == "cuda" else (sizes["hidden"], sizes["layers"])
        llama(hidden, layers, 32000 if device == "cuda" else 320, "cpu").save_pretrained(tmp / "base")
        AutoTokenizer.from_pretrained(ROOT / "tests/assets/tiny-llama").save_pretrained(tmp / "base")
        text = " ".join(["the quick brown fox jumps over the lazy dog"] * 120)
        (tmp / "data.jsonl").write_text("".join(json.dumps({"text": text}) + "\n" for _ in range(32)))
        for label, change in cases.items():
            run = tmp / label.replace(" ", "-")
            training = {"batch_size": 4, "max_length": 512, "max_steps": 2, "save_steps": 1000, "padding_free": False}
            config = {
                "task": "llm", "trainer": "sft", "base_model": str(tmp / "base"), "project_name": str(run),
                "log": "none", "data": {"path": str(tmp / "data.jsonl"), "chat_template": "none"},
                "peft": change.get("peft", {"enabled": False}),
                "training_args": {**training, **change["training_args"]},
            }  # fmt: skip
            (tmp / "c.json").write_text(json.dumps(config))
            done = subprocess.run(
                [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(tmp / "c.json")],
                capture_output=True, text=True, cwd=ROOT,
            )  # fmt: skip
            if done.returncode != 0:
                print(f"  {label}: FAILED (exit {done.returncode}) {done.stderr[-800:]}")
                continue
            memory = json.loads((run / "run.json").read_text())["memory"]
            measured = memory["measured"].get("max_memory_allocated", memory["measured"].get("peak_above_baseline"))
            ratio = memory["estimate_over_measured"]
            print(
                f"  {label}: estimate {memory['bytes_per_device'] / 2**20:.0f} MiB, measured {measured / 2**20:.0f} "
                f"MiB, ratio {ratio:.2f} {'ok' if 0.85 <= ratio <= 1.15 else 'OUTSIDE +-15%'}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU: the code paths only")
    parser.add_argument("--checks", default="1,2,3,4,5,6,7", help="which checks to run, e.g. 2,3")
    parser.add_argument("--params", type=float, default=1.0, help="billions of parameters of check 2/3's model")
    args = parser.parse_args()
    if not torch.cuda.is_available() and not args.cpu_smoke:
        print("gpu_checks: no CUDA device here; nothing to check (run it on a GPU machine, or --cpu-smoke)")
        return 0
    device = "cpu" if args.cpu_smoke else "cuda"
    # ~1B: 16 layers of width 2048 (12 * 2048^2 * 16 ~ 0.8B) plus a 32k x 2048 embedding and head.
    big = {"big_hidden": 2048, "big_layers": int(16 * args.params), "big_vocab": 32000, "reps": 10}
    small = {"hidden": 256, "layers": 2, "vocab": 1024, "seq": 128, "steps": 30}
    if args.cpu_smoke:
        big = {"big_hidden": 256, "big_layers": 2, "big_vocab": 1024, "reps": 2}
        small = {"hidden": 64, "layers": 2, "vocab": 256, "seq": 32, "steps": 6}
    start = time.perf_counter()
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (smoke)"
    print(f"device {name}, torch {torch.__version__}")
    checks = (precision_runs, eight_bit_against_bnb, compiled_against_eager, qlora, padding_free_batches)
    checks += (captured_came_step,)
    checks += (memory_estimates,)
    for check in [checks[int(n) - 1] for n in args.checks.split(",")]:
        try:
            check(device, {**small, **big})
        except Exception:
            print(f"  {check.__name__} FAILED:\n" + traceback.format_exc())
        print(f"  [{time.perf_counter() - start:.0f} s elapsed]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
