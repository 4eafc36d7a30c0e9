"""The config's optional `export:` section, which runs an export when training ends; what it can name is
declared in `autotrain.config.export_formats`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from autotrain.config.base import StrictModel
from autotrain.config.export_formats import quant_problem
from autotrain.fields import Bool

ExportFormat = Literal["merged", "gguf", "ollama"]
ExportQuant = Literal["f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0"]


class ExportConfig(StrictModel):
    format: ExportFormat = Field("gguf", description="merged | gguf | ollama (see `autotrain export --help`).")
    quant: ExportQuant | None = Field(
        None, description="GGUF: f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0 (default f16); merged: f32, f16, bf16."
    )
    output: str | None = Field(None, description="Output folder (default: project_name/export-FORMAT-QUANT).")
    push_to_hub: Bool = Field(True, description="With hub.push_to_hub: upload the .gguf file beside the model.")

    @model_validator(mode="after")
    def _quant_fits_format(self):
        problem = quant_problem(self.format, self.quant)
        if problem:
            raise ValueError(f"export.quant: {problem}")
        return self
