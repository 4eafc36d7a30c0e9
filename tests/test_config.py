"""Config checking: the broken-config corpus, the shipped configs and their JSON Schemas, `load_config`.

Each file in tests/broken_configs/ starts with one or more lines such as

    # expect: line=12 path=training_args.batch_size message="did you mean" command=llm

meaning: running the command on the file exits 2 and prints `FILE:12:COL: training_args.batch_size: ...`
with the message fragment in it. Keys: `line`, `col` (optional), `path` (`<root>` for the file as a whole),
`message`; and, from the first line only, `command` (validate | llm | text-classification |
image-classification | root = `autotrain --config F` | migrate; default validate) and `via=subprocess` (run
the console entry point in a fresh interpreter instead of in-process). A reported path may go deeper than
the expected one (`betas` matches `betas.0`).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from autotrain.config.interpolate import interpolate
from autotrain.config.load import load_config
from autotrain.config.tasks import TASKS as TASK_TABLE
from autotrain.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = Path(__file__).parent / "broken_configs"
CORPUS = sorted(CORPUS_DIR.glob("*.yml"))
CONFIGS = sorted((REPO_ROOT / "configs").glob("*/*.yml"))
SCHEMAS = REPO_ROOT / "configs" / "schemas"
TASKS = tuple(TASK_TABLE)  # every task: a stale schema of any of them fails here
REGENERATE = f"for t in {' '.join(TASKS)}; do autotrain schema $t -o configs/schemas/$t.schema.json --force; done"
ENTRY = "import sys; from autotrain.cli.main import main; sys.argv[0] = 'autotrain'; main()"
# Variables the corpus relies on being unset.
UNSET = {name: None for name in os.environ if name.startswith("AUTOTRAIN_TEST_")}


def expectations(path: Path) -> list[dict[str, str]]:
    """The `# expect:` lines at the top of a corpus file, as dicts."""
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("# expect:"):
            break
        found.append(dict(item.split("=", 1) for item in shlex.split(line[len("# expect:") :])))
    return found


def command_line(command: str, path: Path) -> list[str]:
    if command == "validate":
        return ["validate", str(path)]
    if command == "root":
        return ["--config", str(path), "--dry-run"]
    if command == "migrate":
        return ["migrate", str(path)]
    return [command, "--config", str(path), "--dry-run"]


def run_fresh(args: list[str], env_extra: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the console entry point in a fresh interpreter; (exit code, stdout + stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTRAIN_TEST_")} | (env_extra or {})
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


def find_issue(output: str, source: str, expect: dict[str, str]) -> str | None:
    """The output line that reports `expect`, or None."""
    where = source + (f":{expect['line']}:" if "line" in expect else ":")
    if "col" in expect:
        where += f"{expect['col']}:"
    # The field itself or something inside it (`betas` covers `betas.2`).
    field = re.compile(rf": {re.escape(expect['path'])}(\.\S+)?: ")
    for line in output.splitlines():
        if line.startswith(where) and field.search(line) and expect["message"] in line:
            return line
    return None


# --- the broken-config corpus ---------------------------------------------------------------------------


def test_corpus_is_complete():
    assert len(CORPUS) >= 30
    for path in CORPUS:
        found = expectations(path)
        assert found, f'{path.name}: first line must be `# expect: line=N path=a.b message="..."`'
        for expect in found:
            assert {"path", "message"} <= expect.keys(), f"{path.name}: {expect}"


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_broken_config_is_reported(cli, path):
    expected = expectations(path)
    options = expected[0]
    args = command_line(options.get("command", "validate"), path)
    if options.get("via") == "subprocess":
        code, output = run_fresh(args)
    else:
        result = cli(*args, env=UNSET)
        code, output = result.exit_code, result.output

    assert code == 2, output
    assert "Traceback" not in output
    for expect in expected:
        assert find_issue(output, str(path), expect), f"expected {expect} in:\n{output}"


def test_every_mistake_is_reported_at_once(cli):
    path = CORPUS_DIR / "several-mistakes.yml"
    expected = expectations(path)
    assert len(expected) >= 8

    result = cli("llm", "--config", path, "--dry-run", env=UNSET)

    assert result.exit_code == 2
    reported = [line for line in result.stderr.splitlines() if line.startswith(f"{path}:")]
    assert len(reported) == len(expected), result.stderr
    for expect in expected:
        assert find_issue(result.stderr, str(path), expect), f"expected {expect} in:\n{result.stderr}"
    assert f"{len(expected)} problems found; nothing was run." in result.stderr
    # Sorted by position in the file.
    lines = [int(line.split(":")[1]) for line in reported]
    assert lines == sorted(lines)


def test_validate_prints_one_line_per_file(cli):
    good, bad = REPO_ROOT / "configs/llm/sft.yml", CORPUS_DIR / "typo-training-args.yml"
    other = REPO_ROOT / "configs/text-classification/imdb.yml"

    result = cli("validate", good, bad, other)

    assert result.exit_code == 2
    assert result.stdout.splitlines() == [f"{good}: ok: llm (sft)", f"{other}: ok: text-classification"]
    assert [line for line in result.stderr.splitlines() if line] == [
        f"{bad}:12:3: training_args.gradient_accumulaton: unknown key (did you mean `gradient_accumulation`?)",
        "1 problem found in 1 of 3 files.",
    ]


def test_unknown_advanced_task_is_reported_once(cli):
    path = CORPUS_DIR / "advanced-unknown-task.yml"
    result = cli("validate", path)
    assert result.exit_code == 2
    # not also "task: required field is missing"
    assert result.stderr.splitlines()[1:] == ["1 problem found."], result.stderr


def test_missing_file_is_bad_input(cli, tmp_path):
    result = cli("validate", tmp_path / "nope.yml")
    assert result.exit_code == 2
    assert f"{tmp_path / 'nope.yml'}: <root>: config file not found" in result.stderr


# --- the shipped configs and their schemas -------------------------------------------------------------


# Continued pretraining on the user's own corpus: `validate` says the file is still to come, as the dry run does.
NEEDS_DATA = {"llm/clm.yml": "data.path: `data/corpus.jsonl` does not exist on this machine"}


@pytest.mark.parametrize("path", CONFIGS, ids=[f"{p.parent.name}/{p.name}" for p in CONFIGS])
def test_shipped_config_validates(cli, path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # the quick starts read tests/assets relative to the clone
    result = cli("validate", path)
    needs = NEEDS_DATA.get(f"{path.parent.name}/{path.name}")
    if needs:
        assert result.exit_code == 2 and needs in result.stderr and "1 problem found" in result.stderr, result.output
        return
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{path}: ok: ")


@pytest.mark.parametrize("path", CONFIGS, ids=[f"{p.parent.name}/{p.name}" for p in CONFIGS])
def test_shipped_config_matches_its_json_schema(path):
    text = path.read_text(encoding="utf-8")
    first = text.splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    assert first.startswith(prefix), f"{path.name} must start with `{prefix}../schemas/TASK.schema.json`"
    data, unset, _ = interpolate(yaml.safe_load(text), environ={})
    assert not unset
    schema_file = (path.parent / first[len(prefix) :]).resolve()
    assert schema_file == (SCHEMAS / f"{data['task']}.schema.json").resolve()

    validator = jsonschema.Draft202012Validator(json.loads(schema_file.read_text(encoding="utf-8")))
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]
    assert not errors


@pytest.mark.parametrize("task", TASKS)
def test_shipped_schema_is_current(cli, task):
    result = cli("schema", task)
    assert result.exit_code == 0
    shipped = (SCHEMAS / f"{task}.schema.json").read_text(encoding="utf-8")
    assert result.stdout == shipped, f"configs/schemas/{task}.schema.json is stale; regenerate: {REGENERATE}"


def test_json_schema_rejects_what_the_loader_rejects():
    schema = json.loads((SCHEMAS / "llm.schema.json").read_text(encoding="utf-8"))
    data = yaml.safe_load((CORPUS_DIR / "typo-training-args.yml").read_text(encoding="utf-8"))
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(data))
    assert [list(e.absolute_path) for e in errors] == [["training_args"]]
    assert "gradient_accumulaton" in errors[0].message


# --- load_config ---------------------------------------------------------------------------------------

MINIMAL = """\
task: llm
trainer: clm
base_model: {base_model}
project_name: run
data:
  path: data/corpus.jsonl
  column_mapping:
    text: text
training_args:
  lr: 3e-5
hub:
  token: {token}
"""


def write(tmp_path: Path, base_model: str = "tiny", token: str = "null") -> Path:
    path = tmp_path / "config.yml"
    path.write_text(MINIMAL.format(base_model=base_model, token=token), encoding="utf-8")
    return path


def test_yaml_11_exponent_string_is_a_number(tmp_path):
    # YAML 1.1 reads `3e-5` (no dot) as a string; it is still a learning rate.
    assert yaml.safe_load("lr: 3e-5")["lr"] == "3e-5"
    cfg = load_config(write(tmp_path), environ={}).config
    assert cfg.training_args.lr == pytest.approx(3e-5)


def test_env_default_is_used_when_unset(tmp_path):
    path = write(tmp_path, base_model="${AUTOTRAIN_TEST_MODEL:-HuggingFaceTB/SmolLM2-135M}")
    assert load_config(path, environ={}).config.base_model == "HuggingFaceTB/SmolLM2-135M"
    assert load_config(path, environ={"AUTOTRAIN_TEST_MODEL": "mine"}).config.base_model == "mine"


def test_unset_env_variable_names_it(tmp_path):
    path = write(tmp_path, base_model="${AUTOTRAIN_TEST_MODEL}")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    [issue] = caught.value.issues
    assert (issue.path, issue.line, issue.col) == (("base_model",), 3, 1)
    assert "`AUTOTRAIN_TEST_MODEL` is not set" in issue.message
    assert issue.format().startswith(f"{path}:3:1: base_model: environment variable")


def test_secrets_are_redacted_from_the_resolved_config(tmp_path):
    path = write(tmp_path, base_model="org/${MY_API_KEY}", token="${HF_TOKEN}")
    loaded = load_config(path, environ={"HF_TOKEN": "hf_secret123", "MY_API_KEY": "k3y"})
    assert loaded.config.hub.token == "hf_secret123"
    assert loaded.redacted()["hub"]["token"] == "***"
    assert loaded.redacted()["base_model"] == "org/***"
    assert "hf_secret123" not in json.dumps(loaded.redacted())


def test_secret_values_are_redacted_from_errors(tmp_path):
    path = write(tmp_path, token="12345")
    text = path.read_text(encoding="utf-8").replace("  lr: 3e-5", "  lr: 3e-5\n  seed: ${HF_TOKEN}")
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={"HF_TOKEN": "hf_secret123"})
    messages = {issue.dotted: issue.message for issue in caught.value.issues}
    assert set(messages) == {"training_args.seed", "hub.token"}
    assert "hf_secret123" not in str(caught.value) and "***" in messages["training_args.seed"]
    assert "12345" not in messages["hub.token"]  # a value under a secret key is never echoed


def test_overrides_through_the_api(tmp_path):
    path = write(tmp_path)
    overrides = ["training_args.lr=1e-4", "peft.r=8", "training_args.max_grad_norm=null"]
    cfg = load_config(path, overrides, environ={}).config
    assert cfg.training_args.lr == pytest.approx(1e-4)
    assert cfg.peft is not None and cfg.peft.r == 8 and cfg.peft.enabled
    assert cfg.training_args.max_grad_norm is None


def test_short_optimizer_tuple_is_reported_once():
    overrides = ["training_args.optimizer=came", "training_args.optimizer_args.betas=[0.9]"]
    with pytest.raises(ConfigError) as caught:
        load_config(REPO_ROOT / "configs/llm/sft.yml", overrides, environ={})
    [issue] = caught.value.issues
    assert issue.format() == "--set training_args.optimizer_args.betas: expects 3 values, got 1 (optimizer `came`)"


def test_expected_task_mismatch(tmp_path):
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path), expected_task="text-classification", environ={})
    [issue] = caught.value.issues
    assert issue.dotted == "task" and "run `autotrain llm --config" in issue.message


def test_misspelt_required_key_is_one_problem(cli):
    path = CORPUS_DIR / "typo-required-key.yml"
    result = cli("validate", path, env=UNSET)
    assert result.exit_code == 2
    reported = [line for line in result.stderr.splitlines() if line.startswith(f"{path}:")]
    assert len(reported) == 1 and "did you mean `base_model`" in reported[0], result.stderr


def test_the_word_no_is_a_choice_not_false(cli, tmp_path):
    """YAML 1.1 reads `no` as false; `mixed_precision: no` and `eval_strategy: no` still mean "no"."""
    config = tmp_path / "no.yml"
    config.write_text(
        "task: llm\nbase_model: x\nproject_name: runs/a\ndata: {path: someone/data}\n"
        "training_args:\n  mixed_precision: no\n  eval_strategy: no\n",
        encoding="utf-8",
    )
    assert cli("validate", config).exit_code == 0
    result = cli("llm", "--config", config, "--dry-run", "--set", "training_args.mixed_precision=no")
    assert result.exit_code == 0, result.output
    assert "precision: no on cpu (asked: no)" in result.stdout


# The validated model is the contract: `model_validate` refuses what `load_config` refuses ----------------

CONTRACT_BASE = {"task": "llm", "base_model": "m", "project_name": "p", "data": {"path": "d.jsonl"}}
CONTRACT_CASES = {
    "packing-for-dpo": {"trainer": "dpo", "training_args": {"packing": True}},
    "beta-zero-for-dpo": {"trainer": "dpo", "training_args": {"beta": 0}},
    "unknown-optimizer-arg": {"training_args": {"optimizer_args": {"bogus": 1}}},
    "missing-preference-column": {"trainer": "orpo", "data": {"path": "d.jsonl", "column_mapping": {"prompt": "q"}}},
}


@pytest.mark.parametrize("case", list(CONTRACT_CASES))
def test_model_validate_refuses_what_load_config_refuses(tmp_path, case):
    """The cross-field rules run inside validation, with the same path and message as load_config's report
    (which adds the file:line:col)."""
    from pydantic import ValidationError

    from autotrain.config.llm import LLMConfig

    data = {**CONTRACT_BASE, **CONTRACT_CASES[case]}
    with pytest.raises(ValidationError) as refused:
        LLMConfig.model_validate(data)
    from_model = {(".".join(map(str, e["loc"])), e["msg"]) for e in refused.value.errors()}
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump(data))
    (tmp_path / "d.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError) as loaded:
        load_config(path)
    from_file = {(".".join(map(str, i.path)), i.message) for i in loaded.value.issues}
    assert from_model == from_file
    assert all(i.line is not None for i in loaded.value.issues), "load_config keeps pointing at the line"


def test_optimizer_args_are_typed_once_validated():
    from autotrain.config.llm import LLMConfig
    from autotrain.optimizers.args import Came8BitArgs

    given = {"betas": [0.9, 0.99, 0.999], "block_size": 256}
    data = {**CONTRACT_BASE, "training_args": {"optimizer": "came_8bit", "optimizer_args": given}}
    cfg = LLMConfig.model_validate(data)
    assert isinstance(cfg.training_args.optimizer_args, Came8BitArgs)
    assert cfg.training_args.optimizer_args.betas == (0.9, 0.99, 0.999)
    # Saved (autotrain.yaml) as what was given, and read back to the same config.
    assert cfg.model_dump(mode="json")["training_args"]["optimizer_args"] == given
    assert LLMConfig.model_validate(cfg.model_dump(mode="json")) == cfg


def test_rules_and_schema_errors_are_reported_together(tmp_path):
    """With a field the schema refuses, the model's rules cannot run: load_config runs them on the rest."""
    data = {**CONTRACT_BASE, "distributed": {"fsdp": {"version": 2}}, "training_args": {"lr": "fast"}}
    path = tmp_path / "c.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as loaded:
        load_config(path)
    paths = {".".join(map(str, i.path)) for i in loaded.value.issues}
    assert paths == {"distributed.fsdp", "training_args.lr"}


def test_image_classification_takes_no_max_length():
    """Nothing reads it for images: the schema has no such field, so every way in refuses it."""
    from pydantic import ValidationError

    from autotrain.config.classification import ImageClassificationConfig

    data = {"task": "image-classification", "base_model": "m", "project_name": "p", "data": {"path": "d"}}
    assert ImageClassificationConfig.model_validate(data)
    with pytest.raises(ValidationError) as refused:
        ImageClassificationConfig.model_validate({**data, "training_args": {"max_length": 224}})
    assert [e["loc"] for e in refused.value.errors()] == [("training_args", "max_length")]
    assert (
        "max_length"
        not in json.loads((SCHEMAS / "image-classification.schema.json").read_text())["$defs"][
            "ClassificationTrainingArgs"
        ]["properties"]
    )


def test_the_command_names_the_task_a_config_leaves_out(cli, tmp_path):
    """`autotrain llm --config F` on a config with no `task:` (one written for another tool, or by hand) is an
    llm config, and every other mistake in it is reported at once, not only the missing task."""
    path = tmp_path / "flat.yml"
    path.write_text("base_model: tiny\nproject_name: runs/x\ndata: {path: d.jsonl}\nlora_r: 8\nlearning_rate: 1e-4\n")
    result = cli("llm", "--config", path, "--dry-run")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert not any(": task: " in line for line in lines), result.stderr
    assert f"{path}:4:1: lora_r: unknown key (did you mean `peft.r`?)" in lines, result.stderr
    assert f"{path}:5:1: learning_rate: unknown key (did you mean `training_args.lr`?)" in lines, result.stderr
    # Without a command that names it, the task is still asked for.
    root = cli("--config", path, "--dry-run")
    assert root.exit_code == 2 and f"{path}:1:1: task: required field is missing" in root.stderr
    assert f"(or name it in the command: `autotrain llm --config {path}`)" in root.stderr


def test_a_config_without_a_task_trains_as_the_command_says(tmp_path):
    path = tmp_path / "no-task.yml"
    path.write_text("base_model: tiny\nproject_name: runs/x\ndata: {path: d.csv}\n")
    loaded = load_config(path, expected_task="text-classification", environ={})
    assert loaded.config.task == "text-classification" and loaded.raw["task"] == "text-classification"


@pytest.mark.parametrize("template", ["llm/sft.yml", "seq2seq/samsum.yml", "vlm/captions-smolvlm.yml"])
def test_every_task_with_an_adapter_checks_it_alike(template):
    """llm, seq2seq and vlm share the `peft:` rules: a switched-off adapter cannot be quantized or merged, and
    that is all a sharded run is told about it (there is no adapter to merge)."""
    overrides = [
        "peft.enabled=false",
        "peft.quantization=int4",
        "peft.merge_adapter=true",
        "distributed.strategy=fsdp",
        "distributed.num_processes=2",
    ]
    with pytest.raises(ConfigError) as caught:
        load_config(REPO_ROOT / "configs" / template, overrides, environ={})
    assert sorted(issue.format() for issue in caught.value.issues) == [
        "--set peft.merge_adapter: `peft.merge_adapter` needs `peft.enabled: true`",
        "--set peft.quantization: `peft.quantization` needs `peft.enabled: true` (QLoRA trains an adapter)",
    ]
    with pytest.raises(ConfigError) as caught:  # an adapter that is on: its merge needs whole weights
        load_config(REPO_ROOT / "configs" / template, ["peft.enabled=true", *overrides[2:]], environ={})
    assert [issue.format() for issue in caught.value.issues] == [
        "--set peft.merge_adapter: `peft.merge_adapter` cannot run under `distributed.strategy: fsdp` (the weights "
        "are sharded); merge the saved adapter afterwards, or use `strategy: ddp`"
    ]


@pytest.mark.parametrize(
    ("template", "what"),
    [("token-classification/conll2003.yml", "tag"), ("object-detection/cppe5.yml", "category")],
)
def test_label_names_are_given_once(template, what):
    with pytest.raises(ConfigError) as caught:
        load_config(REPO_ROOT / "configs" / template, ["data.labels=[a,b,a]"], environ={})
    [issue] = caught.value.issues
    assert issue.format() == f"--set data.labels: each {what} once: `a` appear(s) more than once"
