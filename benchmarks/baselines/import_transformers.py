"""What any transformers training script imports before its first line of work: the floor
benchmarks/e2e_classification.py sets the quick starts' wall times against."""

import torch  # noqa: F401
import transformers  # noqa: F401
