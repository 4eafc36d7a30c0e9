"""The memory estimate: what it counts, what the meta-device trace records, what the dry run and run.json say."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotrain.training.memory import RUN_OBJECTS, ModelShape, Setup, estimate, suggestions

ROOT = Path(__file__).resolve().parent
TINY = ROOT / "assets" / "tiny-llama"
SHAPE = ModelShape(
    params=1_000_000,
    linear_params=800_000,
    lora_params=10_000,
    largest_param=100_000,
    largest_layer_params=200_000,
    layers=4,
    hidden=64,
    vocab=1000,
    layer_bytes_per_token=4000.0,
    rest_bytes_per_token=500.0,
    activation_bytes=4,
    layer_backward_bytes_per_token=1000.0,
)
FULL = Setup("clm", 2, 128, False, "adamw_torch", "no", "cpu", None, None)


def step(setup: Setup) -> dict[str, int]:
    """The parts alive during the optimizer step (weights, gradients, state and the step's scratch)."""
    return estimate(SHAPE, setup).moments["optimizer step"]


def test_optimizer_state_follows_the_table():
    adamw = step(FULL)
    assert adamw["weights"] == adamw["gradients"] == 4_000_000
    assert adamw["optimizer state"] == 8_000_000  # two fp32 moments
    assert step(dataclasses.replace(FULL, optimizer="came_8bit"))["optimizer state"] == 1_000_000
    assert "optimizer state" not in step(dataclasses.replace(FULL, optimizer="sgd"))  # none


def test_bf16_weights_keep_torch_state_in_bf16_and_the_bundled_state_in_fp32_beside_master_weights():
    """A bf16 full fine-tune on a GPU: torch's AdamW keeps its moments like the weights (2 x 2 bytes); the bundled
    optimizers keep fp32 (or 8-bit) state whatever the weights, and a 4-byte fp32 master copy of each."""
    bf16 = dataclasses.replace(FULL, device="cuda", precision="bf16")
    state = {name: step(dataclasses.replace(bf16, optimizer=name))["optimizer state"] for name in
             ("adamw_torch", "fused_adam", "came", "came_8bit")}  # fmt: skip
    assert state == {"adamw_torch": 4_000_000, "fused_adam": 12_000_000, "came": 8_000_000, "came_8bit": 5_000_000}


def test_lora_trains_the_adapter_and_4bit_shrinks_the_linear_layers():
    lora = dataclasses.replace(FULL, lora=(8, "all-linear", 0.0), device="cuda", precision="bf16")
    parts = step(lora)
    assert parts["gradients"] == 10_000 * 4 and parts["optimizer state"] == 10_000 * 8
    assert parts["weights"] == 1_000_000 * 2 + 10_000 * 4  # bf16 base, fp32 adapter
    qlora = step(dataclasses.replace(lora, quantization="int4"))["weights"]
    assert qlora < 800_000 * 0.52 + 200_000 * 4 + 10_000 * 4 + 1


def test_checkpointing_and_batch_size_change_the_activations():
    layers = estimate(SHAPE, FULL).moments["layer backward"]
    assert layers["activations"] == 2 * 128 * (4 * 4000 + 500)
    assert layers["layer backward"] == 2 * 128 * 1000  # what the traced backward of one layer adds
    ckpt = estimate(SHAPE, dataclasses.replace(FULL, gradient_checkpointing=True)).moments["layer backward"]
    assert ckpt["activations"] == 2 * 128 * (4 * 64 * 4 + 500)  # each layer's input
    assert ckpt["layer backward"] == 2 * 128 * (4000 + 1000)  # the layer recomputed, then its backward
    half = estimate(SHAPE, dataclasses.replace(FULL, batch_size=1)).moments["layer backward"]
    assert half["activations"] == layers["activations"] // 2
    paired = estimate(SHAPE, dataclasses.replace(FULL, trainer="dpo", loss="full")).moments["layer backward"]
    assert paired["activations"] == 2 * layers["activations"]  # chosen and rejected


def test_the_peak_is_the_largest_moment_and_gradients_persist_only_with_accumulation():
    one = estimate(SHAPE, FULL)
    assert one.peak == max(one.phases.values()) == one.phases[one.phase]
    assert "gradients" not in one.moments["loss backward"]  # freed after each step, formed in backward
    accumulated = estimate(SHAPE, dataclasses.replace(FULL, gradient_accumulation=2))
    assert accumulated.moments["loss backward"]["gradients"] == 4_000_000  # kept from the previous micro-batch
    assert accumulated.phases["loss backward"] == one.phases["loss backward"] + 4_000_000


def test_the_runtime_counts_on_the_cpu_only():
    cpu = estimate(SHAPE, dataclasses.replace(FULL, runtime=500 * 2**20))
    assert cpu.parts["runtime"] == 500 * 2**20 + RUN_OBJECTS
    gpu = estimate(SHAPE, dataclasses.replace(FULL, runtime=500 * 2**20, device="cuda", precision="bf16"))
    assert "runtime" not in gpu.parts
    assert any("runtime" in why for why in estimate(SHAPE, FULL).low)  # CPU, not measured: could be low


def test_sharding_divides_per_device():
    ddp = step(dataclasses.replace(FULL, world_size=4))
    assert ddp["gradient buckets"] == ddp["gradients"]
    fsdp = step(dataclasses.replace(FULL, world_size=4, strategy="fsdp"))
    assert fsdp["weights"] == 1_000_000 and fsdp["optimizer state"] == 2_000_000
    assert fsdp["gathered layers"] == 2 * 200_000 * 4
    zero2 = step(dataclasses.replace(FULL, world_size=4, strategy="deepspeed"))
    assert zero2["weights"] == 4_000_000 and zero2["gradients"] == 1_000_000


def test_the_cheapest_change_that_fits_is_suggested():
    setup = dataclasses.replace(FULL, batch_size=8)
    need = estimate(SHAPE, setup).peak
    found = suggestions(lambda s: SHAPE, setup, need - 1)
    assert found and found[0][0].startswith("training_args.batch_size: 4 with gradient_accumulation: 2")
    assert found[0][1].peak < need
    assert suggestions(lambda s: SHAPE, setup, 1000) == []  # nothing fits in 1 kB


def test_meta_trace_matches_what_autograd_keeps_on_the_cpu():
    """The meta-device trace (fused attention stood in for) against the same forward pass on the CPU."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from autotrain.training.model_shape import trace_model

    config = AutoConfig.from_pretrained(TINY)
    shape = trace_model(config.to_json_string(), "llm", 128, "float32", "sdpa", None, True, "cpu")
    model = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32).train()
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in weights:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    ids = torch.randint(0, 320, (1, 128))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)
    traced = 128 * (shape.layers * shape.layer_bytes_per_token + shape.rest_bytes_per_token)
    assert traced == pytest.approx(sum(seen.values()), rel=0.05)
    assert shape.params == sum(p.numel() for p in model.parameters())


def test_the_tally_counts_a_storage_once_and_no_weight_on_the_meta_device():
    """On the meta device every storage's address is 0: the tally tells storages apart by identity, a view
    and its tensor being one storage."""
    import torch

    from autotrain.training.model_shape import _Tally, storage_key

    weight = torch.empty(8, 8, device="meta")
    activation, other = torch.empty(4, 8, device="meta"), torch.empty(2, device="meta")
    tally = _Tally()
    tally.weights = {storage_key(weight)}
    for saved in (activation, activation[1:], activation.t(), other, weight, weight[0]):
        tally.pack(saved)
    assert tally.by_layer() == ({}, 4 * 8 * 4 + 2 * 4)


def test_the_trace_loads_the_attention_kernel_a_run_loads():
    """eager when asked; otherwise transformers' default, as a run loads the model (sdpa where it has it)."""
    import torch
    from transformers import AutoConfig

    from autotrain.training import model_shape

    config = AutoConfig.from_pretrained(TINY).to_json_string()
    kernels = []
    real = torch.nn.functional.scaled_dot_product_attention

    def counted(*args, **kwargs):
        kernels.append("sdpa")
        return real(*args, **kwargs)

    for attention in ("eager", "sdpa"):
        model_shape.trace_model.cache_clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(model_shape, "_sdpa_for", lambda device: counted)
            model_shape.trace_model(config, "llm", 16, "float32", attention, None, True, "cuda")
        kernels.append(attention)
    model_shape.trace_model.cache_clear()
    assert kernels == ["eager", *["sdpa"] * 2, "sdpa"]  # tiny-llama: 2 layers


def test_the_trace_keeps_the_attention_probabilities_where_the_cpu_kernel_is_not_fused(monkeypatch):
    """tiny-llama has 4 query and 2 key heads: torch 2.8's CPU flash kernel does not take them grouped and
    falls back to the math path, which keeps 4 x 128 x 128 probabilities per layer. The trace for the CPU
    follows the probe; the one for CUDA (fused kernels there) does not."""
    from transformers import AutoConfig

    from autotrain.training import model_shape

    config = AutoConfig.from_pretrained(TINY).to_json_string()
    args = (config, "llm", 128, "float32", "sdpa", None, True)
    fused = model_shape.trace_model(*args, "cuda").layer_bytes_per_token
    model_shape.trace_model.cache_clear()
    monkeypatch.setattr(model_shape, "cpu_fuses_grouped_attention", lambda: False)
    unfused = model_shape.trace_model(*args, "cpu").layer_bytes_per_token
    model_shape.trace_model.cache_clear()
    probabilities = 4 * 128 * 128 * 4  # heads x length x length x fp32, kept once per layer
    assert (unfused - fused) * 128 >= probabilities


@pytest.mark.slow
def test_lora_count_matches_peft():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from autotrain.training.model_shape import trace_model

    config = AutoConfig.from_pretrained(TINY).to_json_string()
    shape = trace_model(config, "llm", 16, "float32", "sdpa", (8, "all-linear", 0.0), True)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32), LoraConfig(r=8, target_modules="all-linear")
    )
    assert shape.lora_params == sum(p.numel() for p in model.parameters() if p.requires_grad)


def write_config(tmp_path: Path, **training) -> Path:
    data = tmp_path / "data.jsonl"
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 80)
    data.write_text("".join(json.dumps({"text": text}) + "\n" for _ in range(32)), encoding="utf-8")
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(TINY),
        "project_name": str(tmp_path / "run"),
        "log": "none",
        "data": {"path": str(data), "chat_template": "none"},
        "training_args": {"batch_size": 16, "max_length": 512, "mixed_precision": "no", "padding_free": False,
                          "logging_steps": 1, "save_steps": 1000, **training},
    }  # fmt: skip
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_dry_run_prints_the_estimate_and_what_fits(tmp_path, cli):
    from autotrain.config.load import load_config
    from autotrain.run.fit import memory_record, planned

    path = write_config(tmp_path)
    result = cli("llm", "--config", path, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "memory estimate: " in result.stdout and "optimizer state: " in result.stdout
    assert "  covers: the process's resident memory (its peak RSS)" in result.stdout
    assert "  runtime: " in result.stdout and "  fits: " in result.stdout
    cfg = load_config(path).config
    need = memory_record(cfg, planned(cfg))["bytes_per_device"]
    path = write_config(tmp_path, memory_budget=need - 2**20)
    result = cli("llm", "--config", path, "--dry-run")
    assert "warning: does not fit" in result.stdout and "memory_budget" in result.stdout
    # A smaller batch with more accumulation, the same effective batch (16): which split fits depends on the
    # activations, larger where the CPU's attention kernel is not fused (torch 2.8 and grouped heads).
    found = re.search(
        r"cheapest change that fits: training_args.batch_size: (\d+) with gradient_accumulation: (\d+)", result.stdout
    )
    assert found and int(found[1]) < 16 and int(found[1]) * int(found[2]) == 16, result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("training", [{}, {"gradient_checkpointing": True, "optimizer": "came_8bit"}])
def test_run_json_holds_the_measured_peak_within_the_bounds(tmp_path, training):
    """Two steps of the tiny Llama: the estimate made before the run within -5% / +10% of the process's peak
    resident memory (the run fixes malloc's mmap threshold, so freed blocks leave the resident set)."""
    path = write_config(tmp_path, max_steps=2, **training)
    env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    code = "import sys; from autotrain.cli.main import main; sys.argv[0] = 'autotrain'; main()"
    done = subprocess.run([sys.executable, "-c", code, "llm", "--config", str(path)], env=env, timeout=900)
    assert done.returncode == 0
    memory = json.loads((tmp_path / "run" / "run.json").read_text())["memory"]
    assert 0.95 <= memory["estimate_over_measured"] <= 1.10, memory
    assert memory["measured"]["peak_rss"] > memory["measured"]["rss_at_start"] > 0
    card = (tmp_path / "run" / "README.md").read_text()
    assert "## Memory" in card and "measured (peak resident memory of the process)" in card


# --- each term against what torch does on the CPU ----------------------------------------------------------


def live_peak(run) -> tuple[int, int]:
    """(bytes alive when `run()` began, the most alive above that while it ran), as LiveStorages counts."""
    from autotrain.training.backward_trace import LiveStorages

    live = LiveStorages(set())
    with live:
        live.watch()
        run()
        return live.start, live.stop()


def test_the_traced_backward_of_a_layer_matches_the_same_backward_on_the_cpu():
    """The meta-device trace (fused attention stood in for) against the last layer's backward run for real:
    the same storages followed the same way, on tensors with data."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from autotrain.training.backward_trace import layer_backward_bytes
    from autotrain.training.model_shape import _decoder_layers, trace_model

    config = AutoConfig.from_pretrained(TINY)
    shape = trace_model(config.to_json_string(), "llm", 128, "float32", "sdpa", None, False, "cpu")
    model = AutoModelForCausalLM.from_pretrained(TINY, dtype=torch.float32).train()
    ids = torch.randint(0, 320, (1, 128))
    measured = layer_backward_bytes(model, _decoder_layers(model), lambda: model.model(input_ids=ids))
    assert shape.layer_backward_bytes_per_token * 128 == pytest.approx(measured, rel=0.10)


def test_the_fused_loss_step_matches_trls_kernel_on_the_cpu():
    """TRL's fused LM head (the SFT trainer's loss) run on the CPU: what its forward and backward hold at
    their highest, as the estimate's formula says (autotrain.training.loss_memory)."""
    import torch

    # TRL's fused head (trl.kernels, 1.16+), which ORPO's chunked loss runs: older TRL has none (ORPO: full logits)
    kernel = pytest.importorskip("trl.kernels.chunked_logprob", reason="this TRL has no fused LM head (1.16+)")
    ChunkedLogProbFunction = kernel.ChunkedLogProbFunction

    from autotrain.training.loss_memory import Head, loss_step

    tokens, hidden, vocab = 100, 16, 40_000  # two vocabulary tiles: 32768 entries, then the rest
    states = torch.randn(tokens, hidden, requires_grad=True)
    weight = torch.randn(vocab, hidden, requires_grad=True)
    targets = torch.randint(0, vocab, (tokens,))
    outputs = ("log_probs", "entropy", "is_top1")
    result = {}

    def forward():
        result["out"] = ChunkedLogProbFunction.apply(states, weight, None, targets, 1.0, 32768, None, 1.0, outputs)

    _, forward_peak = live_peak(forward)
    loss = -result.pop("out")[0].sum()
    _, backward_peak = live_peak(loss.backward)
    # one sequence of tokens + 1 positions: the head sees `tokens` of them
    step = loss_step("fused", Head(1, tokens + 1, vocab, hidden, 4, 4, True, "cpu"))
    assert forward_peak == pytest.approx(step.forward, rel=0.05)
    assert backward_peak == pytest.approx(step.backward, rel=0.05)


def test_the_full_loss_step_matches_transformers_loss_on_the_cpu():
    """The model's own loss (transformers' ForCausalLMLoss, the clm trainer's) on fp32 logits."""
    import torch
    from transformers.loss.loss_utils import ForCausalLMLoss

    from autotrain.training.loss_memory import ENTROPY_ROWS, FP32, Head, loss_step

    sequences, length, vocab = 2, 150, 1000
    labels = torch.randint(0, vocab, (sequences, length))
    result = {}

    def forward():
        result["logits"] = torch.randn(sequences, length, vocab, requires_grad=True)
        result["loss"] = ForCausalLMLoss(result["logits"], labels, vocab)

    _, forward_peak = live_peak(forward)
    _, backward_peak = live_peak(result["loss"].backward)
    step = loss_step("full", Head(sequences, length, vocab, 32, 4, 4, False, "cpu"))
    entropy = 3 * ENTROPY_ROWS * vocab * FP32  # TRL's entropy of the logits: not in the model's own loss
    assert forward_peak == pytest.approx(step.forward - entropy, rel=0.05)
    assert backward_peak == pytest.approx(step.backward, rel=0.05)


@pytest.mark.parametrize("trained", [False, True], ids=["lora", "full"])
def test_the_chunked_loss_step_matches_autotrains_chunked_cross_entropy_on_the_cpu(monkeypatch, trained):
    """autotrain's chunked loss (`cross_entropy: chunked`) run on the CPU, as the loss step calls it: the labelled
    tokens' hidden states gathered, then ChunkedCrossEntropy a chunk at a time. Its forward and backward hold
    what the estimate says, and far less than the full loss on the same shapes."""
    import torch

    from autotrain.training import chunked_loss
    from autotrain.training.lm_loss import ChunkedCrossEntropy
    from autotrain.training.loss_memory import Head, loss_step

    monkeypatch.setattr(chunked_loss, "CHUNK_BYTES", 2**20)  # 48 tokens of 5,000 entries: seven chunks
    sequences, length, hidden, vocab = 1, 301, 16, 5000
    states = torch.randn(sequences, length, hidden, requires_grad=True)
    weight = torch.randn(vocab, hidden, requires_grad=trained)
    targets = torch.randint(0, vocab, (sequences, length))
    targets[:, -1] = -100  # the last position has no next token
    chunk = chunked_loss.chunk_tokens(vocab)
    assert chunk == 48
    result = {}

    def forward():
        mask = targets != -100
        result["loss"] = ChunkedCrossEntropy.apply(states[mask], weight, None, targets[mask], 0.0, chunk)[0]

    _, forward_peak = live_peak(forward)
    _, backward_peak = live_peak(result.pop("loss").backward)
    head = Head(sequences, length, vocab, hidden, 4, 4, trained, "cpu")
    step = loss_step("chunked", head)
    # torch's CPU matmul with the head's weight as a transposed operand allocates a weight-sized buffer that it
    # leaves untouched: counted here, never resident (benchmarks/chunked_loss.py measures the resident set)
    untouched = vocab * hidden * 4
    assert forward_peak - untouched == pytest.approx(step.forward, rel=0.05)
    assert backward_peak <= step.backward * 1.05
    assert step.backward < 0.25 * loss_step("full", head).backward


def test_the_estimate_counts_the_loss_the_plan_decided():
    """The loss step follows `plan.cross_entropy`: chunked for sft / clm, TRL's fused head for orpo's chunked,
    the full logits for `full` and where a sharding strategy made the plan compute them in full; the trainers
    without the field keep their own (TRL's fused head for DPO)."""
    from autotrain.config.llm import LLMConfig
    from autotrain.training.memory import setup_of
    from autotrain.training.plan import resolve_plan

    def path(trainer: str, distributed: dict | None = None, **training) -> str:
        cfg = {"task": "llm", "trainer": trainer, "base_model": "m", "project_name": "p", "data": {"path": "d"}}
        cfg = LLMConfig.model_validate({**cfg, "training_args": training, "distributed": distributed or {}})
        return setup_of(cfg, resolve_plan(cfg, device="cpu")).loss_path

    assert path("sft") == path("clm") == "chunked"
    assert path("sft", cross_entropy="full") == path("clm", cross_entropy="full") == "full"
    assert path("orpo") == "fused" and path("orpo", cross_entropy="full") == "full"
    assert path("dpo") == "fused" and path("reward") == "model"
    sharded = {"num_processes": 2, "strategy": "fsdp"}
    assert path("sft", sharded) == "full"


# --- the CPU process: malloc and the runtime's baseline -----------------------------------------------------


def test_malloc_returns_freed_blocks_unless_the_user_set_it(monkeypatch):
    from autotrain.training import allocator

    for name in ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES", allocator.OPT_OUT):
        monkeypatch.delenv(name, raising=False)
    glibc = allocator._mallopt() is not None
    assert allocator.mode() == ("returning" if glibc else "system")
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert allocator.mode() == "user" and allocator.return_freed_blocks() == "user"
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.setenv(allocator.OPT_OUT, "system")
    assert allocator.mode() == "system"
    low = estimate(SHAPE, dataclasses.replace(FULL, runtime=2**29, malloc="system")).low
    assert any("malloc keeps freed blocks" in why for why in low)


# Run in a process of its own (malloc's settings are the process's): page faults of 4 MiB blocks allocated
# and freed 50 times, outside an optimizer's step and inside one (once the heap has grown to hold them).
_FAULTS = """
import resource, torch
from autotrain.training import allocator
assert allocator.return_freed_blocks() == "returning"

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        torch.ones(1 << 20)  # 4 MiB, freed at once
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

class Probe(torch.optim.SGD):
    def step(self, closure=None):
        faults()  # the heap grows to hold the block
        self.inside = faults()

probe = Probe([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
outside = faults()
probe.step()
print(outside, probe.inside)
"""


def test_an_optimizer_step_takes_its_temporaries_from_the_heap():
    from autotrain.training import allocator

    if allocator._mallopt() is None:
        pytest.skip("glibc's mallopt is not here (another C library): malloc is left as it is")
    mine = ("MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES", allocator.OPT_OUT)
    env = {k: v for k, v in os.environ.items() if k not in mine}
    done = subprocess.run([sys.executable, "-c", _FAULTS], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    outside, inside = map(int, done.stdout.split())
    # Outside a step each block is a mapping of its own, faulted in anew (1,024 pages each; a few where the
    # kernel gives every mapping huge pages); inside, the heap's block is reused.
    assert outside >= 50, (outside, inside)
    assert inside <= outside // 20, (outside, inside)


def test_a_local_tokenizer_is_measured_once_per_its_files(tmp_path, monkeypatch):
    import shutil
    import types

    from autotrain.run import runtime

    folder = tmp_path / "model"
    shutil.copytree(TINY, folder)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    measured = []
    real = runtime._measure_tokenizer
    monkeypatch.setattr(runtime, "_measure_tokenizer", lambda *a: measured.append(a) or real(*a))
    cfg = types.SimpleNamespace(base_model=str(folder), revision=None, trust_remote_code=False, gguf=None)

    def figure() -> int | None:
        runtime._TOKENIZERS.clear()  # a new run's process
        return runtime.tokenizer_bytes(cfg)

    first = figure()
    assert first is not None and first > 0 and len(measured) == 1
    assert figure() == first and len(measured) == 1  # read back
    tokenizer = folder / "tokenizer_config.json"
    os.utime(tokenizer, ns=(tokenizer.stat().st_atime_ns, tokenizer.stat().st_mtime_ns + 10**9))
    assert figure() is not None and len(measured) == 2  # a changed file is measured again
    cfg.base_model = "nobody/not-on-this-machine"  # a hub id that is not downloaded: measured, never stored
    assert figure() is None and figure() is None and len(measured) == 4


@pytest.mark.slow
def test_the_runtime_baseline_is_measured_once_per_environment_and_cached(tmp_path, monkeypatch):
    from autotrain.run import runtime

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = runtime.runtime_baseline()
    assert first["cached"] is False and first["bytes"] > first["imports"] > 100 * 2**20, first
    second = runtime.runtime_baseline()
    assert second["cached"] is True and second["bytes"] == first["bytes"]
    assert len(list((tmp_path / "autotrain" / "runtime").glob("*.json"))) == 1
