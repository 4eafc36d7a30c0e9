"""The hand-written baseline of benchmarks/e2e_classification.py: what a user would write with transformers
alone. The same files, label ids in sorted order, dynamic padding, and the TrainingArguments values autotrain
derives from its config.

    python benchmarks/baselines/trainer_classification.py SETTINGS

SETTINGS: JSON with `model`, `train` (a CSV file), `max_length`, `metrics` (where to write them), `args`.
"""

import json
import sys

import torch
from datasets import load_dataset
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

settings = json.loads(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(settings["model"])
data = load_dataset("csv", data_files=settings["train"], split="train")
labels = sorted(set(data["label"]))
data = data.map(
    lambda b: {
        **tokenizer(b["text"], truncation=True, max_length=settings["max_length"]),
        "labels": [labels.index(x) for x in b["label"]],
    },
    batched=True,
    remove_columns=data.column_names,
)
model = AutoModelForSequenceClassification.from_pretrained(
    settings["model"],
    dtype=torch.float32,
    num_labels=len(labels),
    ignore_mismatched_sizes=True,
    id2label=dict(enumerate(labels)),
    label2id={x: i for i, x in enumerate(labels)},
)
trainer = Trainer(
    model=model,
    args=TrainingArguments(**settings["args"]),
    train_dataset=data,
    processing_class=tokenizer,
    data_collator=DataCollatorWithPadding(tokenizer),
)
metrics = trainer.train().metrics
trainer.save_model()
with open(settings["metrics"], "w") as handle:
    json.dump(metrics, handle)
