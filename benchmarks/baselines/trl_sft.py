"""The hand-written baseline of benchmarks/e2e_llm.py and sft_throughput.py: what a user would write with TRL
alone. It gets the SFTConfig values autotrain derives from its config, loads the same files, saves the model
and writes the Trainer's metrics.

    python benchmarks/baselines/trl_sft.py SETTINGS

SETTINGS: JSON with `model`, `data` (JSON lines), `metrics` (where to write them) and SFTConfig's `args`.
"""

import json
import sys

import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

settings = json.loads(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(settings["model"])
model = AutoModelForCausalLM.from_pretrained(settings["model"], dtype=torch.float32)
dataset = load_dataset("json", data_files=settings["data"], split="train")
trainer = SFTTrainer(model=model, args=SFTConfig(**settings["args"]), train_dataset=dataset, processing_class=tokenizer)
metrics = trainer.train().metrics
trainer.save_model()
with open(settings["metrics"], "w") as handle:
    json.dump(metrics, handle)
