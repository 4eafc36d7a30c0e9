"""The hand-written baseline of benchmarks/real_model.py: TRL's SFTTrainer with a LoRA adapter, each logged step
stamped with the time (a line of JSON per log in `settings["log"]`).

    python benchmarks/baselines/trl_sft_lora.py SETTINGS

SETTINGS: JSON with `model`, `data` (JSON lines), `log`, the LoRA's `r` and `alpha`, and SFTConfig's `args`.
"""

import json
import sys
import time

import torch
from datasets import load_dataset
from peft import LoraConfig
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
lora = LoraConfig(
    r=settings["r"], lora_alpha=settings["alpha"], lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM"
)
trainer = SFTTrainer(
    model=model,
    args=SFTConfig(**settings["args"]),
    train_dataset=dataset,
    processing_class=tokenizer,
    peft_config=lora,
    callbacks=[Stamp()],
)
trainer.train()
trainer.save_model()
