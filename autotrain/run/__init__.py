"""Orchestration: claim the project folder, resolve the plan, launch one or many processes, build the
trainer, train, save. The command line and the app call `run`; nothing below imports this package."""
