"""A finished vlm run: answer each row's image (and prompt), evaluate the answers against references (SQuAD
exact match and F1, as evaluation in training did), and chat about one image.

The model is the LoRA adapter on its base model (merged in unless the base is quantized), the merged model
in `merged/`, or the full model; the processor is the one saved with the run.
"""

from __future__ import annotations

from pathlib import Path

from autotrain.inference.inputs import Rows


def read_rows(cfg, path: Path, labels: bool) -> Rows:
    """A table (or AutoTrain Advanced's folder with a metadata file) of images, prompts (vqa) and, with
    `labels`, answers."""
    from autotrain.data.vlm import load_vlm_rows

    dataset, name = load_vlm_rows(cfg, str(path), labels)
    values = [{key: row[key] for key in ("image", "prompt") if key in row} for row in dataset]
    return Rows("image", values, list(dataset["answer"]) if labels else None, name)


def load(folder: Path, cfg, device: str):
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from autotrain.errors import UserInputError
    from autotrain.inference.load import read_plan
    from autotrain.training.verify import load_saved

    quantization = cfg.peft.quantization if cfg.uses_peft else None
    if quantization and device != "cuda":
        raise UserInputError(
            f"the run in `{folder}` loads its base model in {quantization} (peft.quantization), which needs a "
            f"CUDA GPU; this machine has none ({device})"
        )
    merged = folder / "merged"
    source = merged if (merged / "config.json").is_file() else folder
    processor = load_saved(AutoProcessor, source, "processor", trust_remote_code=cfg.trust_remote_code)
    # fp32 on a CPU; elsewhere the dtype the run loaded its weights in (its plan)
    dtype = torch.float32 if device == "cpu" else getattr(torch, read_plan(folder).load_dtype)
    if (source / "config.json").is_file():
        model = load_saved(
            AutoModelForImageTextToText, source, "model", dtype=dtype, trust_remote_code=cfg.trust_remote_code
        )
        return model.to(device), processor
    return _adapter_on_base(folder, cfg, device, dtype), processor


def _adapter_on_base(folder: Path, cfg, device: str, dtype):
    import pickle

    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    from autotrain.errors import UserInputError
    from autotrain.inference.load import read_plan
    from autotrain.trainers.common import load_pretrained
    from autotrain.training.verify import load_failure

    kwargs = {"dtype": dtype}
    if cfg.peft.quantization:
        from autotrain.trainers.llm.model import quantization_config
        from autotrain.training.precision import Precision

        # the compute dtype training resolved (its plan), not a new decision
        kwargs["quantization_config"] = quantization_config(cfg, Precision(read_plan(folder).precision.mode, device))
    base = load_pretrained(AutoModelForImageTextToText, cfg, "weights", None, **kwargs)
    try:
        model = PeftModel.from_pretrained(base, str(folder))
    except (OSError, ValueError, pickle.UnpicklingError) as exc:
        raise UserInputError(f"cannot load the LoRA adapter saved in `{folder}`: {load_failure(exc)}") from None
    return model if cfg.peft.quantization else model.merge_and_unload().to(device)


def max_tokens(cfg, model, processor) -> int:
    return cfg.training_args.max_length


def _answers(run, values: list[dict], batch_size: int, advance) -> list[str]:
    from autotrain.trainers.vlm import conversation_of, generate_answers

    conversation = conversation_of(run.config, run.processor, run.model.config)
    out = []
    for start in range(0, len(values), batch_size):
        part = values[start : start + batch_size]
        out += generate_answers(run.model, conversation, part, batch_size, run.config.training_args.max_new_tokens)
        advance(len(part))
    return out


def predict(run, values: list[dict], batch_size: int, advance) -> list[dict]:
    return [{"answer": answer} for answer in _answers(run, values, batch_size, advance)]


def evaluate(run, rows: Rows, batch_size: int, advance) -> dict:
    from autotrain.trainers.vlm import answer_scores

    predicted = _answers(run, rows.values, batch_size, advance)
    return {"rows": len(rows), **answer_scores(predicted, rows.labels)}


def chat(run, image: str, settings, messages) -> int:
    """Answer each message about `image` (one question, one answer: the turns the run was trained on);
    returns the number of answers."""
    from autotrain.inference.bounds import EXIT_COMMANDS, checked_text
    from autotrain.trainers.vlm import conversation_of, generate_answers

    conversation = conversation_of(run.config, run.processor, run.model.config)
    answers = 0
    for number, message in enumerate(messages, 1):
        text = checked_text(message, f"message {number}").strip()
        if text in EXIT_COMMANDS:
            break
        if not text:
            continue
        row = {"image": image, "prompt": text}
        print(generate_answers(run.model, conversation, [row], 1, settings.max_new_tokens)[0], flush=True)
        answers += 1
    return answers
