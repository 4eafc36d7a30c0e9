"""The parity checks of one export, LLM or another task: read the artifact back as users will, compare it
with the trained model and with the weights it was meant to hold."""

from __future__ import annotations

from pathlib import Path

from autotrain.export.parity import collect_prompts, compare, greedy, llama_cpp_check, rounded_copy


def _rounding(fmt: str, quant: str):
    """What the file stores for a weight array (None: exactly the trained weights)."""
    if quant == "f32":
        return None
    if fmt != "merged":
        from autotrain.export.gguf_file import round_trip

        return lambda array: round_trip(array, quant)
    import torch

    dtype = torch.float16 if quant == "f16" else torch.bfloat16
    return lambda array: torch.from_numpy(array).to(dtype).float().numpy()


def llm_parity(source, fmt: str, quant: str, artifact: Path, stage: Path, summary, family) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer, reference = source.processor, source.model
    prompts = collect_prompts(source.config, tokenizer)
    gguf = {} if fmt == "merged" else {"gguf_file": artifact.name}
    exported = AutoModelForCausalLM.from_pretrained(str(stage), dtype=torch.float32, **gguf).eval()
    exported_tokenizer = AutoTokenizer.from_pretrained(str(stage), **gguf)
    expected = [greedy(reference, ids) for ids in prompts.ids]
    transformers_result = {"vs_trained": compare(reference, exported, prompts, expected)}
    rounding = _rounding(fmt, quant)
    if rounding is not None:
        twin = rounded_copy(reference, rounding)
        transformers_result["vs_written_weights"] = compare(twin, exported, prompts, expected)
        del twin
    else:
        transformers_result["vs_written_weights"] = transformers_result["vs_trained"]
    readers = {"transformers": transformers_result}
    if fmt != "merged":
        readers["llama_cpp"] = llama_cpp_check(artifact, prompts, expected, reference)
    result = {
        "prompts": len(prompts.ids),
        "prompts_source": prompts.source,
        "greedy_tokens": len(expected[0]) if expected else 0,
        "system_prompt": prompts.system,
        "readers": readers,
        "tokenizer": _tokenizer_check(tokenizer, exported_tokenizer, prompts, summary),
    }
    if tokenizer.chat_template:
        result["chat_template"] = _template_check(tokenizer, exported_tokenizer, prompts)
    if family is not None:
        result["modelfile_template"] = {"family": family.name, "renders_as_training": True}
    return result


def _template_check(tokenizer, exported, prompts) -> dict:
    """The template applied at inference (the one the export carries) renders each prompt as training did."""

    def render(tok, conversation):
        return tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)

    same = sum(render(tokenizer, c) == render(exported, c) for c in prompts.conversations)
    return {
        "same_template": exported.chat_template == tokenizer.chat_template,
        "conversations": len(prompts.conversations),
        "renders_equal": same,
    }


def _tokenizer_check(tokenizer, exported, prompts, summary) -> dict:
    same = sum(
        tokenizer(text, add_special_tokens=False)["input_ids"] == exported(text, add_special_tokens=False)["input_ids"]
        for text in prompts.texts
    )
    # transformers rebuilds a GGUF tokenizer with GPT-2's split unless it knows the file's pre-tokenizer;
    # it has no SmolLM split (digits one by one), which llama.cpp has. A difference there is the reader's.
    limited = summary is not None and summary.pre_tokenizer == "smollm"
    return {"texts": len(prompts.texts), "same_ids": same, "reader_limited": limited}


def task_parity(source, quant: str, stage: Path) -> dict:
    """Every task but the LLM's: the exported folder read back as `autotrain predict` reads a run, the same
    rows predicted with it, with the trained model and with the trained model rounded as the folder stores
    it (autotrain.export.predictions)."""
    from autotrain.export.predictions import compare, predict, probe_rows
    from autotrain.export.source import loadable
    from autotrain.inference.load import finished_run, load_model

    cfg = source.config
    rows, where = probe_rows(cfg)
    trained = predict(finished_run(source.folder, cfg, source.model, source.processor, "cpu"), rows)
    model, processor = load_model(stage, loadable(cfg), "cpu")
    # fp32, as the trained model computes: sentence-transformers loads an f16 folder as f16, which on a CPU
    # would measure its arithmetic rather than the weights the folder holds
    exported = predict(finished_run(stage, cfg, model.float(), processor, "cpu"), rows)
    del model
    rounding = _rounding("merged", quant)
    if rounding is None:
        written = trained
    else:
        twin = rounded_copy(source.model, rounding)
        written = predict(finished_run(source.folder, cfg, twin, source.processor, "cpu"), rows)
        del twin
    reader = "sentence-transformers" if cfg.task == "sentence-transformers" else "transformers"
    return {
        "prompts": len(rows),
        "prompts_source": where,
        "readers": {
            reader: {"vs_trained": compare(trained, exported), "vs_written_weights": compare(written, exported)}
        },
    }
