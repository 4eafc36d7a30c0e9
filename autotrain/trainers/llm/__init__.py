"""LLM trainers: one builder module per entry of the trainer table (`autotrain.config.trainers`)."""
