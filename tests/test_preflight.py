"""Each package or device a config needs and this machine lacks is one line before any data is prepared:
a problem (exit code 2) or, where the run has a safe way on, a note. The dry run says the same.

The packages are hidden here (importlib.util.find_spec answers None for them); a GPU host is stood for by
torch.cuda reporting devices (nothing gets far enough to use one).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import yaml

from autotrain.config.load import load_config
from autotrain.run import preflight as preflight_module
from autotrain.run.preflight import preflight
from autotrain.training.plan import resolve_plan

ASSETS = Path(__file__).parent / "assets"


def write_config(tmp_path: Path, top: dict | None = None, **training) -> Path:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": str(ASSETS / "tiny-llama"),
        "project_name": str(tmp_path / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl"), "column_mapping": {"text": "text"}},
        "training_args": {"max_steps": 2, "batch_size": 2, "max_length": 32, "mixed_precision": "no", **training},
        **(top or {}),
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def hide(monkeypatch):
    """`hide("bitsandbytes", ...)`: find_spec says these packages are not installed."""

    def hide(*names: str) -> None:
        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util, "find_spec", lambda name, *a, **k: None if name in names else real(name, *a, **k)
        )

    return hide


@pytest.fixture
def gpu_host(monkeypatch):
    """`gpu_host(2)`: torch sees this many CUDA GPUs (0: a CUDA build of torch that sees none)."""

    def stand_in(count: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
        monkeypatch.setattr(torch.version, "cuda", "12.8")

    return stand_in


@pytest.fixture
def no_data(monkeypatch):
    """Fails the run (and the test) if any data is prepared or any model loaded."""
    import autotrain.trainers.llm.base as base
    import autotrain.trainers.llm.model as model

    prepared: list[str] = []

    def refuse(what):
        def called(*args, **kwargs):
            prepared.append(what)
            raise AssertionError(f"{what} ran before the preflight refused the run")

        return called

    monkeypatch.setattr(base, "load_llm_split", refuse("data preparation"))
    monkeypatch.setattr(model, "build_model", refuse("model load"))
    return prepared


def run_refused(cli, config: Path, no_data: list, *expected: str) -> str:
    """The run refused in one line before any data is prepared or model loaded (`no_data`): what makes the
    answer come at once, whatever the machine's load."""
    result = cli("llm", "--config", config)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    # one line per problem: the one expected here, and any other this machine has (bitsandbytes, ...)
    named = [line for line in errors if all(text in line for text in expected)]
    assert len(named) == 1, result.stderr
    assert no_data == [], "data was prepared before the refusal"
    assert not (config.parent / "run").exists(), "a refused run leaves no project folder"
    assert "Traceback" not in result.output and "ImportError" not in result.output
    return named[0]


def test_quantized_loading_without_bitsandbytes(cli, tmp_path, hide, gpu_host, no_data):
    hide("bitsandbytes")
    gpu_host(1)
    config = write_config(tmp_path, {"peft": {"enabled": True, "quantization": "int4"}}, mixed_precision="fp16")
    line = run_refused(cli, config, no_data, "peft.quantization: int4", "pip install bitsandbytes")
    assert "CUDA GPU" not in line, "a GPU is there: only the package is missing"


def test_an_8bit_optimizer_without_bitsandbytes(cli, tmp_path, hide, gpu_host, no_data):
    hide("bitsandbytes")
    gpu_host(1)
    config = write_config(tmp_path, optimizer="adamw_8bit", mixed_precision="fp16")
    run_refused(
        cli, config, no_data, "training_args.optimizer: adamw_8bit needs bitsandbytes: pip install bitsandbytes"
    )


def test_flash_attention_without_flash_attn_in_a_padded_run(cli, tmp_path, hide, gpu_host, no_data):
    hide("flash_attn")
    gpu_host(1)
    config = write_config(
        tmp_path, {"attn_implementation": "flash_attention_2"}, padding_free=False, mixed_precision="fp16"
    )
    run_refused(
        cli,
        config,
        no_data,
        "attn_implementation: flash_attention_2 needs the flash-attn package: pip install flash-attn",
    )


def test_deepspeed_without_the_package(cli, tmp_path, hide, gpu_host, no_data):
    hide("deepspeed")
    gpu_host(2)
    config = write_config(tmp_path, {"distributed": {"num_processes": 2, "strategy": "deepspeed"}})
    run_refused(cli, config, no_data, "distributed.strategy: deepspeed needs the `deepspeed` package")


def test_a_gpu_config_on_a_cpu_only_torch_names_the_build(cli, tmp_path, monkeypatch, no_data):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    config = write_config(tmp_path, mixed_precision="fp16")
    run_refused(cli, config, no_data, "fp16 needs a CUDA GPU", "is a CPU-only build: install a CUDA build of torch")


def test_a_gpu_config_in_a_container_without_gpus_says_gpus_all(cli, tmp_path, monkeypatch, gpu_host, no_data):
    gpu_host(0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(preflight_module, "in_container", lambda: True)
    config = write_config(tmp_path, {"peft": {"enabled": True, "quantization": "int8"}})
    run_refused(cli, config, no_data, "needs a CUDA GPU", "start it with --gpus all")


def test_hidden_gpus_are_named(monkeypatch, gpu_host):
    gpu_host(0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert preflight_module.why_no_gpu() == "CUDA_VISIBLE_DEVICES='' hides every GPU"


def test_a_cuda_torch_that_sees_no_gpu_trains_on_the_cpu_with_a_note(cli, tmp_path, monkeypatch, gpu_host):
    # mixed_precision: auto asks for no GPU, so this is not refused; but a CUDA build of torch in a
    # container started without --gpus all was meant for one, and the run says so before it starts.
    gpu_host(0)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(preflight_module, "in_container", lambda: True)
    result = cli("llm", "--config", write_config(tmp_path, mixed_precision="auto"), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "note: no GPU is visible (this container was started without GPUs: start it with --gpus all" in result.stderr
    assert "precision: no on cpu" in result.stdout


def test_a_cpu_only_torch_without_gpu_needs_no_note(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    cfg = load_config(write_config(tmp_path, mixed_precision="auto")).config
    found = preflight(cfg, resolve_plan(cfg))
    assert found.problems == [] and found.notes == []


# --- safe fallbacks: a note, and the run goes on ----------------------------------------------------------


def test_padding_free_without_flash_attn_falls_back_to_rows_with_a_note(tmp_path, hide):
    hide("flash_attn")
    cfg = load_config(write_config(tmp_path, {"attn_implementation": "flash_attention_2"})).config
    plan = resolve_plan(cfg, device="cuda")
    assert (plan.attn_implementation, plan.padding_free) == ("sdpa", "rows")
    found = preflight(cfg, plan)
    assert found.problems == []
    assert any("flash-attn package is not installed): attention runs sdpa" in note for note in found.notes)
    assert plan.record()["attn_implementation"] == "sdpa" and plan.record()["notes"] == list(plan.notes)


def test_flash_attention_where_it_runs_is_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: object() if name == "flash_attn" else None)
    cfg = load_config(write_config(tmp_path, {"attn_implementation": "flash_attention_2"})).config
    plan = resolve_plan(cfg, device="cuda")
    assert (plan.attn_implementation, plan.padding_free, plan.notes) == ("flash_attention_2", "one sequence", ())


def test_the_dry_run_says_the_fallback_on_the_cpu(cli, tmp_path):
    config = write_config(tmp_path, {"attn_implementation": "flash_attention_2"})
    result = cli("llm", "--config", config, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "note: attn_implementation: flash_attention_2 cannot run here (no CUDA GPU is visible)" in result.stderr
    assert "attention: sdpa (asked: flash_attention_2); padding-free batches: rows" in result.stdout


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_came_without_a_compiler_is_a_note_then_the_eager_step(tmp_path, monkeypatch, device):
    monkeypatch.setenv("CXX", "/bin/false")  # there, but does not run: a broken toolchain reads the same
    monkeypatch.setenv("CC", "/bin/false")  # the Docker runtime's case (emulated as in benchmarks/gpu_checks)
    cfg = load_config(write_config(tmp_path, optimizer="came", optimizer_args={"compile": True})).config
    found = preflight(cfg, resolve_plan(cfg, device=device))
    assert found.problems == []
    [note] = [n for n in found.notes if n.startswith("optimizer: CAME compiles")]
    assert "it will take the eager step" in note
    assert ("C compiler for Triton" if device == "cuda" else "C++ compiler") in note


def test_came_with_a_compiler_or_without_compiling_needs_no_note(tmp_path, monkeypatch):
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("no g++ on this machine to find")
    monkeypatch.delenv("CXX", raising=False)
    cfg = load_config(write_config(tmp_path, optimizer="came", optimizer_args={"compile": True})).config
    notes = preflight(cfg, resolve_plan(cfg, device="cpu")).notes
    # a CUDA build of torch on a machine without a GPU says so; no note about the compiler
    assert [n for n in notes if not n.startswith("no GPU is visible")] == []
    monkeypatch.setenv("CXX", "/bin/false")
    short = load_config(write_config(tmp_path, optimizer="came")).config  # auto: 2 steps compile nothing
    notes = preflight(short, resolve_plan(short, device="cpu")).notes
    assert [n for n in notes if not n.startswith("no GPU is visible")] == []


def test_the_dry_run_reports_every_preflight_problem(cli, tmp_path, hide, monkeypatch):
    hide("bitsandbytes", "deepspeed")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = write_config(
        tmp_path,
        {
            "peft": {"enabled": True, "quantization": "int4"},
            "distributed": {"num_processes": 2, "strategy": "deepspeed"},
        },
    )
    result = cli("llm", "--config", config, "--dry-run")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert any("pip install bitsandbytes" in e for e in errors), errors
    assert any("strategy: deepspeed needs CUDA GPUs" in e for e in errors), errors
    assert any("needs the `deepspeed` package" in e for e in errors), errors
    assert "# plan" in result.stdout


def test_a_run_says_every_problem_on_a_line_of_its_own_as_the_dry_run_does(cli, tmp_path, hide, monkeypatch, no_data):
    """Three problems: three `error:` lines (they used to be one line of ~600 characters joined by `; `), the
    same lines as the dry run's, exit 2, and nothing prepared."""
    hide("bitsandbytes", "deepspeed")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = write_config(
        tmp_path,
        {
            "peft": {"enabled": True, "quantization": "int4"},
            "distributed": {"num_processes": 2, "strategy": "deepspeed"},
        },
    )
    dry = cli("llm", "--config", config, "--dry-run")
    real = cli("llm", "--config", config)
    assert (dry.exit_code, real.exit_code) == (2, 2), real.output
    said = [[line for line in r.stderr.splitlines() if line.startswith("error: ")] for r in (dry, real)]
    assert len(said[0]) >= 3 and said[1] == said[0], said
    assert no_data == [] and not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        (
            "base_model",
            "tests/assets/tiny-llama",
            "base_model `tests/assets/tiny-llama` does not exist on this machine",
        ),
        ("base_model", "./my-model", "base_model `./my-model` does not exist on this machine"),
        ("base_model", "~/no-such-model.gguf", "base_model `~/no-such-model.gguf` does not exist on this machine"),
        ("data", {"path": "data/corpus.jsonl"}, "data.path `data/corpus.jsonl` does not exist on this machine"),
        ("data", {"path": "corpus.csv"}, "data.path `corpus.csv` does not exist on this machine"),
    ],
)
def test_a_local_path_that_is_not_here_is_named_before_anything_loads(
    cli, tmp_path, monkeypatch, no_data, field, value, named
):
    """A path no hub id can be (two slashes, `./`, `~`, a data file's name) that is not here: one line naming
    it and the folder a relative one starts from, not the loader's "Repo id must be in the form ..."."""
    config = write_config(tmp_path, {field: value})
    monkeypatch.chdir(tmp_path)  # where relative paths start: none of these is here
    line = run_refused(cli, config, no_data, named, "it cannot be a hub id")
    relative = not str(value).startswith("~")
    assert (f"the folder you run from, {tmp_path}" in line) == relative, line
    assert "Repo id" not in line


def test_a_hub_id_is_not_taken_for_a_missing_path(tmp_path):
    from autotrain.training.hub import missing_paths

    loaded = load_config(write_config(tmp_path, {"base_model": "someone/model", "data": {"path": "someone/data"}}))
    assert missing_paths(loaded.config) == []
