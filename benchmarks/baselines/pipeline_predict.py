"""The hand-written baseline of benchmarks/predict.py: a user's script around transformers' pipeline.

    python benchmarks/baselines/pipeline_predict.py MODEL DATA.csv OUT.jsonl BATCH_SIZE

One line of JSON per row of DATA.csv: its text, label and score.
"""

import csv
import json
import sys

from transformers import pipeline

model, data, out, batch_size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
classify = pipeline("text-classification", model=model, device="cpu")
with open(data, encoding="utf-8") as f:
    texts = [row["text"] for row in csv.DictReader(f)]
results = classify(texts, batch_size=batch_size, truncation=True, max_length=32)
with open(out, "w", encoding="utf-8") as f:
    for i, (text, result) in enumerate(zip(texts, results, strict=True)):
        f.write(json.dumps({"row": i, "text": text, "label": result["label"], "score": result["score"]}) + "\n")
