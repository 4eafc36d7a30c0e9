"""Use a finished run: load it from its project folder, chat with it, predict and evaluate on a file.

`load` finds the model (a LoRA adapter on its base model, `merged/`, or a full model), its tokenizer or
image processor and the run's resolved config; `chat`, `predict` and `evaluate` build on it.
"""
