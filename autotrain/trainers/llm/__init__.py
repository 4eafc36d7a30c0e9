"""LLM trainers: one module per `trainer:` value (sft, orpo, dpo, reward, grpo, clm)."""
