"""What any TRL SFT script imports before its first line of work: the floor benchmarks/e2e_llm.py sets the
quick start's wall time against."""

from trl import SFTTrainer  # noqa: F401
