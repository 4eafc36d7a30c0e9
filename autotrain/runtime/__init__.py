"""What a run needs around the Trainer: precision, outputs, progress, checkpoints, signals, launching."""
