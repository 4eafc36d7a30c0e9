"""The config's optional `benchmark:` section: lm-evaluation-harness tasks run on the trained model and its base
model when training ends, as `autotrain evaluate RUN --benchmark TASKS` runs them."""

from __future__ import annotations

from pydantic import Field, field_validator

from autotrain.config.base import StrictModel
from autotrain.fields import Bool, Float, Int


class BenchmarkConfig(StrictModel):
    tasks: list[str] = Field(
        min_length=1,
        max_length=256,
        description="lm-evaluation-harness task, group or tag names (hellaswag, arc_easy, mmlu, gsm8k, ...) or "
        "paths to task YAML files of your own. Needs `pip install 'autotrain[benchmark]'`.",
    )
    limit: Float | None = Field(
        None,
        gt=0,
        description="Examples per task: a count (100), or a fraction of the task below 1 (0.1). null: all.",
    )
    num_fewshot: Int | None = Field(None, ge=0, le=1000, description="Few-shot examples (null: each task's own).")
    batch_size: Int = Field(8, ge=1, le=4096, description="Requests per forward pass.")
    chat_template: Bool = Field(
        False, description="Render each request with the run's chat template (lm-eval's --apply_chat_template)."
    )

    @field_validator("limit")
    @classmethod
    def _count_or_fraction(cls, value: float | None) -> float | None:
        if value is not None and value >= 1 and value != int(value):
            raise ValueError(f"a count of examples must be whole, or a fraction below 1 (got {value})")
        return value


def limit_argument(limit: float | None) -> int | float | None:
    """The limit as lm-evaluation-harness takes it: a count as an int, a fraction as a float."""
    return int(limit) if limit is not None and limit >= 1 else limit
