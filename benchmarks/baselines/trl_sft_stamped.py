"""The hand-written baseline of benchmarks/data_prep.py: a bare TRL SFTTrainer on a JSON lines file, each logged
step stamped with the time (a line of JSON per log in `settings["log"]`), so that the time to the first
optimizer step can be read.

    python benchmarks/baselines/trl_sft_stamped.py SETTINGS

SETTINGS: JSON with `model`, `data` (JSON lines), `log` and SFTConfig's `args`.
"""

import json
import sys
import time

import torch
from datasets import load_dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import SFTConfig, SFTTrainer

settings = json.loads(sys.argv[1])


class Stamp(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        with open(settings["log"], "a") as handle:
            handle.write(json.dumps({"step": state.global_step, **(logs or {}), "time": time.time()}) + "\n")


tokenizer = AutoTokenizer.from_pretrained(settings["model"])
model = AutoModelForCausalLM.from_pretrained(settings["model"], dtype=torch.float32)
dataset = load_dataset("json", data_files=settings["data"], split="train")
trainer = SFTTrainer(
    model=model,
    args=SFTConfig(**settings["args"]),
    train_dataset=dataset,
    processing_class=tokenizer,
    callbacks=[Stamp()],
)
trainer.train()
