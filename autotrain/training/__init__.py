"""What builders and the runner use around the Trainer: the resolved plan and precision, checkpoints,
signals, the divergence guard and progress. Never imports `trainers` or `run`."""
