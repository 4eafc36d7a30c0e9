"""Hostile input beyond configs: folders that cannot be written, data files of the wrong shape, rewards
that answer nonsense, damaged checkpoints, inputs built to exhaust memory. Each case drives the command
line and expects exit 2 with one line that says what is wrong, or a run that goes on where it safely can.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ASSETS = Path(__file__).parent / "assets"
TINY = ASSETS / "tiny-llama"
CHAT = ASSETS / "data" / "chat.jsonl"


def llm_config(tmp_path: Path, project: Path | None = None, **changes) -> Path:
    """A 2-step SFT/CLM config on the tiny model; `changes` replace top-level keys (dicts are merged)."""
    config = {
        "task": "llm",
        "trainer": "clm",
        "base_model": str(TINY),
        "project_name": str(project or tmp_path / "run"),
        "data": {"path": str(ASSETS / "data" / "text.jsonl")},
        "training_args": {"max_steps": 2, "batch_size": 4, "max_length": 32, "mixed_precision": "no"},
    }
    for key, value in changes.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def one_error_line(result, *fragments: str) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert all(fragment in errors[0] for fragment in fragments), errors[0]
    return errors[0]


# --- folders that cannot be written -----------------------------------------------------------------------


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` made read-only: by its mode, or, for root (whom modes do not stop), as immutable."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    immutable = False
    try:
        probe = folder / ".probe"
        try:
            probe.touch()
        except PermissionError:
            pass
        else:  # root: the mode does not bind
            probe.unlink()
            chattr = shutil.which("chattr")
            done = subprocess.run([chattr, "+i", str(folder)], capture_output=True) if chattr else None
            if done is None or done.returncode != 0:
                pytest.skip("running as root without `chattr +i`: no way to make a folder read-only here")
            immutable = True
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


@pytest.mark.parametrize("where", ["inside", "itself"])
def test_a_read_only_project_folder_is_bad_input(cli, tmp_path, where):
    locked = tmp_path / "locked"
    project = locked / "run" if where == "inside" else locked
    config = llm_config(tmp_path, project)
    with read_only(locked):
        result = cli("llm", "--config", config)
        one_error_line(result, f"project folder `{project}`", "cannot write", "project_name")
    assert sorted(p.name for p in locked.iterdir()) == []


def test_predict_into_a_read_only_folder_is_refused_before_loading(cli, tmp_path):
    locked = tmp_path / "locked"
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "hello"}\n')
    with read_only(locked):
        result = cli("predict", tmp_path / "no-run-needed", "-i", data, "-o", locked / "out.jsonl")
        one_error_line(result, "--output", "is not writable")


@pytest.mark.parametrize("command", [["init", "llm"], ["schema", "llm"]])
def test_a_template_or_schema_into_a_read_only_folder_is_bad_input(cli, tmp_path, command):
    locked = tmp_path / "locked"
    with read_only(locked):
        result = cli(*command, "-o", locked / "out.yml")
        one_error_line(result, f"cannot write {locked / 'out.yml'}")


# --- data of the wrong shape ------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "shown"), [("hello there", "str 'hello there'"), (None, "NoneType None")])
def test_a_chat_row_whose_messages_is_not_a_list_is_named(cli, tmp_path, value, shown):
    rows = CHAT.read_text().splitlines()[:6]
    rows.insert(3, json.dumps({"messages": value}))
    data = tmp_path / "chat.jsonl"
    data.write_text("\n".join(rows) + "\n")
    config = llm_config(tmp_path, trainer="sft", data={"path": str(data), "chat_template": "chatml"})
    result = cli("llm", "--config", config)
    one_error_line(result, "row 3", "column `messages`", "list of {role, content} messages", shown)
    assert not (tmp_path / "run" / "run.json").exists()


@pytest.mark.parametrize(
    ("lines", "fragments"),
    [
        (['["a", "b"]', '["c", "d"]'], (":1:", "holds an array, not an object")),
        (['{"text": "a"}', "", '{"text": "b"}', '"just a string"'], (":4:", "holds a string, not an object")),
        (['{"text": "a"}', '{"text": "b"'], (":2:", "not valid JSON")),
    ],
    ids=["arrays", "a-string-line", "broken-line"],
)
def test_a_json_lines_file_that_is_not_objects_names_the_line(cli, tmp_path, lines, fragments):
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(lines) + "\n")
    result = cli("llm", "--config", llm_config(tmp_path, data={"path": str(data)}))
    line = one_error_line(result, str(data), *fragments)
    assert "An error occurred while generating the dataset" not in line


# --- GRPO rewards that answer nonsense ---------------------------------------------------------------------


def test_reward_answers_are_checked_one_by_one():
    from autotrain.errors import UserInputError
    from autotrain.trainers.llm.rewards import checked

    def answering(value):
        return checked(lambda completions, **_: value, "mine.py:score")

    assert answering([1, 0.5, None])(completions=["a", "b", "c"]) == [1.0, 0.5, None]
    for value, shown in [
        ([float("nan"), 1.0], "float nan for completion 0"),
        ([1.0, "good"], "str 'good' for completion 1"),
        (None, "NoneType None"),
        ([1.0], "1 values"),
        ("11", "str '11'"),
    ]:
        with pytest.raises(UserInputError, match="reward `mine.py:score` returned") as caught:
            answering(value)(completions=["a", "b"])
        assert shown in str(caught.value)


REWARDS = """
def nan(completions, **kwargs):
    return [float("nan")] * len(completions)

def text(completions, **kwargs):
    return ["good"] * len(completions)

def nothing(completions, **kwargs):
    return None
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("function", "shown"), [("nan", "float nan"), ("text", "str 'good'"), ("nothing", "NoneType None")]
)
def test_a_reward_that_answers_nonsense_is_named(cli, tmp_path, function, shown):
    (tmp_path / "rewards.py").write_text(REWARDS)
    config = llm_config(
        tmp_path,
        trainer="grpo",
        data={"path": str(ASSETS / "data" / "math.jsonl"), "column_mapping": {"prompt": "question"}},
        training_args={
            "max_steps": 1,
            "num_generations": 4,
            "max_completion_length": 4,
            "rewards": [f"{tmp_path / 'rewards.py'}:{function}"],
        },
    )
    result = cli("llm", "--config", config)
    one_error_line(result, f"reward `{tmp_path / 'rewards.py'}:{function}` returned {shown}")


# --- chat's stdin -------------------------------------------------------------------------------------------


def test_lines_that_are_not_utf8_are_bad_input():
    from autotrain.errors import UserInputError
    from autotrain.inference.chat import typed_lines

    for errors in ("strict", "surrogateescape"):  # a strict reader, and Python's own stdin in a C locale
        stdin = io.TextIOWrapper(io.BytesIO(b"hello\n\xff\xfe there\n"), encoding="utf-8", errors=errors)
        lines = typed_lines(stdin)
        assert next(lines) == "hello"
        with pytest.raises(UserInputError, match="stdin line 2 is not valid UTF-8"):
            next(lines)


# --- damaged checkpoints ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory) -> Path:
    """A finished 4-step SFT run with complete checkpoints at steps 2 and 4 (copied by each test)."""
    from typer.testing import CliRunner

    from autotrain.cli.main import app

    root = tmp_path_factory.mktemp("checkpointed")
    config = llm_config(root, trainer="sft", training_args={"max_steps": 4, "save_steps": 2, "save_total_limit": 3})
    result = CliRunner().invoke(app, ["llm", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (root / "run").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    return root / "run"


class _RunsCode:
    """Unpickled without `weights_only`, this creates a file: proof that the pickle would have run code."""

    def __init__(self, proof: Path):
        self.proof = proof

    def __reduce__(self):
        return (open, (str(self.proof), "w"))


def damage(path: Path, how: str, proof: Path | None = None) -> None:
    """Cut `path` to half its size, or replace it by a torch file whose pickle, fully unpickled, would
    create `proof`."""
    if how == "truncate":
        os.truncate(path, path.stat().st_size // 2)
    else:
        import torch

        torch.save({"state": _RunsCode(proof)}, path)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.pt", "trainer_state.json"])
def test_resume_passes_over_a_damaged_checkpoint(cli, checkpointed, tmp_path, name):
    copy = tmp_path / "run"
    shutil.copytree(checkpointed, copy)
    damaged = copy / "checkpoint-4" / name
    damage(damaged, "truncate")
    config = llm_config(tmp_path, copy, trainer="sft", training_args={"max_steps": 6, "save_steps": 2})
    result = cli("llm", "--config", config, "--resume", "latest")
    assert result.exit_code == 0, result.output
    assert f"warning: skipping damaged checkpoint {damaged.parent}: {damaged}" in result.stderr
    assert f"resuming from {copy / 'checkpoint-2'}" in result.stderr
    assert json.loads((copy / "trainer_state.json").read_text())["global_step"] == 6


@pytest.mark.parametrize("how", ["truncate", "pickle"])
def test_resume_from_a_named_damaged_checkpoint_is_bad_input(cli, tmp_path, how):
    """A checkpoint as autotrain leaves one (markers, state, optimizer), its optimizer file damaged."""
    import torch

    from autotrain.run.project import MARKER
    from autotrain.training.folder import COMPLETE_MARKER

    run = tmp_path / "run"
    checkpoint = run / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    (run / MARKER).write_text("made by autotrain\n")
    (checkpoint / COMPLETE_MARKER).write_text("complete\n")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    torch.save({"state": {0: {"exp_avg": torch.zeros(64, 64)}}, "param_groups": []}, checkpoint / "optimizer.pt")
    damage(checkpoint / "optimizer.pt", how, tmp_path / "PWNED")
    config = llm_config(tmp_path, run, trainer="sft", training_args={"max_steps": 6})
    result = cli("llm", "--config", config, "--resume", checkpoint)
    line = one_error_line(result, f"--resume {checkpoint}: the checkpoint is damaged: {checkpoint / 'optimizer.pt'}")
    assert "weights_only" not in result.output
    if how == "pickle":
        assert "could run code" in line
        assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("command", ["predict", "export"])
def test_a_run_whose_weights_would_run_code_is_refused_without_advice(cli, tmp_path, command):
    """A run folder (config, tokenizer) whose weights are a pickle that runs code when fully unpickled."""
    run = tmp_path / "run"
    shutil.copytree(TINY, run, ignore=shutil.ignore_patterns("*.safetensors"))
    shutil.copy(llm_config(tmp_path, tmp_path / "elsewhere"), run / "autotrain.yaml")
    record_plan(run)
    weights = run / "pytorch_model.bin"
    damage(weights, "pickle", tmp_path / "PWNED")
    data = tmp_path / "rows.jsonl"
    data.write_text('{"text": "the apple is"}\n')
    if command == "predict":
        result = cli("predict", run, "-i", data)
    else:
        result = cli("export", run, "--format", "merged", "-o", tmp_path / "out")
    one_error_line(result, f"cannot load the model saved in `{run}`", "could run code")
    assert "weights_only" not in result.output
    assert not (tmp_path / "PWNED").exists()


# --- inputs built to exhaust memory -------------------------------------------------------------------------

REPO = ASSETS.parent.parent
# Runs `autotrain predict` twice in one interpreter, first on a short input, then on the hostile one, and
# prints the peak resident memory (VmHWM) after each; the peak is reset in between (/proc/self/clear_refs).
PEAKS = """
import sys
from autotrain.cli.main import app

def peak():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmHWM:"))

results = []
for args in (sys.argv[1:sys.argv.index("--")], sys.argv[sys.argv.index("--") + 1:]):
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    try:
        code = app(["predict", *args], standalone_mode=False) or 0
    except SystemExit as exc:
        code = exc.code
    results.append(f"{code} {peak()}")
print(*results)
"""


def peaks(first: list, second: list) -> tuple[tuple[int, int], tuple[int, int], str]:
    """`autotrain predict FIRST`, then `autotrain predict SECOND` in the same fresh interpreter (the model
    loaded by both): ((exit code, peak MiB) of each, stderr)."""
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-c", PEAKS, *map(str, first), "--", *map(str, second)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b, c, d = map(int, done.stdout.split()[-4:])
    return (a, b), (c, d), done.stderr


def untrained_run(tmp_path: Path, task: str) -> Path:
    """A run folder as training leaves one (the shipped tiny model and its resolved config), no training."""
    model = {"llm": "tiny-llama", "text-classification": "tiny-bert", "image-classification": "tiny-vit"}[task]
    config = yaml.safe_load((REPO / "configs" / task / "quickstart.yml").read_text())
    config["base_model"] = str(ASSETS / model)
    config["data"]["path"] = str(REPO / config["data"]["path"])
    config["project_name"] = str(tmp_path / "elsewhere")
    run = tmp_path / "run"
    shutil.copytree(ASSETS / model, run)
    (run / "autotrain.yaml").write_text(yaml.safe_dump(config))
    return record_plan(run)


def record_plan(run: Path) -> Path:
    """run.json as training writes it for the run's saved config on this machine: the plan its model loads by."""
    from autotrain.config.load import load_saved
    from autotrain.training.plan import resolve_plan

    plan = resolve_plan(load_saved(run / "autotrain.yaml"), device="cpu")
    (run / "run.json").write_text(json.dumps({"status": "completed", "plan": plan.record()}))
    return run


def blank_png(path: Path, width: int, height: int) -> None:
    """An RGB PNG of grey pixels, compressed row by row: a 12000x12000 one is ~450 KB and costs no memory."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer = zlib.compressobj(9)
    row = b"\0" + b"\x80" * (3 * width)
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def eight_megabytes() -> str:
    return ("the apple is red and a happy carrot is orange while the sea is blue. " * 130_000)[: 8 << 20]


# Before the inputs were cut to what the model uses (measured on the CPU machine these tests run on):
# an 8 MB row took predict from ~520 MiB to 1533 MiB (text classifier) and 1924 MiB (LLM prompt); the
# 12000x12000 PNG to 2430 MiB. After: ~550, ~550 and ~510 MiB (refused). The margin allowed is 200 MiB.
MARGIN_MIB = 200
needs_proc = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="reads and resets peak memory through Linux's /proc"
)


@pytest.mark.slow
@needs_proc
@pytest.mark.parametrize(("task", "column"), [("text-classification", "text"), ("llm", "prompt")])
def test_an_eight_megabyte_row_costs_what_its_last_tokens_cost(tmp_path, task, column):
    run = untrained_run(tmp_path, task)
    small, big = tmp_path / "small.jsonl", tmp_path / "big.jsonl"
    small.write_text(json.dumps({column: "the apple is red"}) + "\n")
    big.write_text(json.dumps({column: eight_megabytes()}) + "\n")
    extra = ["--max-new-tokens", 2] if task == "llm" else []
    short, hostile, err = peaks(
        [run, "-i", small, "-o", tmp_path / "small.out", *extra], [run, "-i", big, "-o", tmp_path / "big.out", *extra]
    )
    assert short[0] == 0 and hostile[0] == 0, err[-3000:]
    assert hostile[1] - short[1] < MARGIN_MIB, f"an 8 MB row: {hostile[1]} MiB at peak, a short one {short[1]} MiB"


@pytest.mark.slow
@needs_proc
def test_a_huge_png_is_refused_before_it_is_decoded(tmp_path):
    run = untrained_run(tmp_path, "image-classification")
    small, huge = tmp_path / "small", tmp_path / "huge"
    small.mkdir()
    huge.mkdir()
    blank_png(small / "a.png", 64, 64)
    blank_png(huge / "a.png", 12000, 12000)  # 144 Mpx: under PIL's own bomb limit (179 Mpx)
    short, hostile, err = peaks([run, "-i", small], [run, "-i", huge])
    assert short[0] == 0 and hostile[0] == 2, err[-3000:]
    assert f"image {huge / 'a.png'} is 12000x12000 pixels; images up to 67,108,864 pixels" in err
    assert "Traceback" not in err and "DecompressionBomb" not in err
    assert hostile[1] - short[1] < MARGIN_MIB, f"12000x12000: {hostile[1]} MiB at peak, 64x64: {short[1]} MiB"


def test_clipped_texts_keep_the_tokens_the_model_reads():
    """The slice the tokenizer sees gives the same last (LLM) or first (classifier) tokens as the whole."""
    from transformers import AutoTokenizer

    from autotrain.inference.bounds import clip_text

    text = eight_megabytes()[: 64 << 10]
    for model in ("tiny-llama", "tiny-bert"):
        tokenizer = AutoTokenizer.from_pretrained(ASSETS / model)
        whole = tokenizer(text)["input_ids"]
        for budget in (16, 512):
            end = clip_text(tokenizer, text, budget, keep="end")
            start = clip_text(tokenizer, text, budget, keep="start")
            assert len(end) < len(text) // 4 and len(start) < len(text) // 4
            assert tokenizer(end)["input_ids"][-budget:] == whole[-budget:]
            cut = tokenizer(start, truncation=True, max_length=budget)["input_ids"]
            assert cut == tokenizer(text, truncation=True, max_length=budget)["input_ids"]


def test_a_big_jpeg_is_decoded_small_and_a_small_image_untouched(tmp_path):
    from PIL import Image

    from autotrain.inference.bounds import open_image

    Image.new("RGB", (4000, 3000), (200, 30, 30)).save(tmp_path / "big.jpg", quality=90)
    image = open_image(str(tmp_path / "big.jpg"), 32)
    assert min(image.size) >= 64 and max(image.size) <= 4000 // 8 * 2 and image.mode == "RGB"
    Image.new("P", (100, 80)).save(tmp_path / "small.png")
    assert open_image(str(tmp_path / "small.png"), 32).size == (100, 80)


def test_a_base_model_whose_weights_would_run_code_is_bad_input(cli, tmp_path):
    base = tmp_path / "base"
    shutil.copytree(TINY, base, ignore=shutil.ignore_patterns("*.safetensors"))
    damage(base / "pytorch_model.bin", "pickle", tmp_path / "PWNED")
    result = cli("llm", "--config", llm_config(tmp_path, base_model=str(base)))
    one_error_line(result, "base_model", "could run code")
    assert "weights_only" not in result.output
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "run").exists()
