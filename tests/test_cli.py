"""The `autotrain` command line: every command, `--set`, `--dry-run`, dispatch, migrate, secrets, exit codes,
and a start-up that never imports the training stack. Nothing here trains."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname

import jsonschema
import pytest
import yaml

from autotrain.cli import main as cli_main
from autotrain.config.templates import TEMPLATES

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIGS = REPO_ROOT / "configs"
SFT = CONFIGS / "llm" / "sft.yml"  # batch_size 4 x gradient_accumulation 4
CLM = CONFIGS / "llm" / "clm.yml"  # no `peft:` section
HEAVY = ("torch", "transformers", "trl", "peft", "datasets", "accelerate", "fastapi", "uvicorn", "matplotlib")
SECRET = "hf_secret123"

# An AutoTrain Advanced config, shaped like its `llm-orpo` example.
ADVANCED_ORPO = """\
task: llm-orpo
base_model: meta-llama/Meta-Llama-3-8B-Instruct
project_name: autotrain-llama3-8b-orpo
log: tensorboard
backend: local

data:
  path: argilla/distilabel-capybara-dpo-7k-binarized
  train_split: train
  valid_split: null
  chat_template: chatml
  column_mapping:
    text_column: chosen
    rejected_text_column: rejected
    prompt_text_column: prompt

params:
  block_size: 1024
  model_max_length: 8192
  max_prompt_length: 512
  epochs: 3
  batch_size: 2
  lr: 3e-5
  peft: true
  quantization: int4
  target_modules: all-linear
  padding: right
  optimizer: adamw_torch
  scheduler: linear
  gradient_accumulation: 4
  mixed_precision: fp16

hub:
  username: ${HF_USERNAME}
  token: ${HF_TOKEN}
  push_to_hub: true
"""
NO_HUB_ENV = {"HF_USERNAME": None, "HF_TOKEN": None}
HUB_ENV = {"HF_USERNAME": "me", "HF_TOKEN": SECRET}


def cpu_sets(template: str) -> list[str]:
    """`--set`s that let a GPU template's dry run pass on this CPU machine."""
    sets = {"llm/llama3-orpo.yml": ["peft.quantization=null"]}
    return [arg for item in sets.get(template, []) for arg in ("--set", item)]


@pytest.mark.no_cuda
def test_dry_run_reports_every_problem_of_a_gpu_config_on_this_machine(cli, advanced):
    """The AutoTrain Advanced ORPO example asks for tensorboard, fp16 and int4: all three, at once, exit 2."""
    result = cli("llm", "--dry-run", "--config", advanced, env=HUB_ENV)
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert any("tensorboard" in line for line in errors), result.stderr
    assert any("fp16 needs a CUDA GPU" in line for line in errors), result.stderr
    assert any("peft.quantization: int4" in line for line in errors), result.stderr
    assert "Traceback" not in result.output


def resolved(stdout: str) -> dict:
    """The resolved config that `--dry-run` prints before its `# plan`."""
    assert "\n# plan\n" in stdout, stdout
    return yaml.safe_load(stdout.split("\n# plan\n", 1)[0])


@pytest.fixture
def advanced(tmp_path) -> Path:
    path = tmp_path / "orpo-advanced.yml"
    path.write_text(ADVANCED_ORPO, encoding="utf-8")
    return path


# --- help and usage -------------------------------------------------------------------------------------

COMMANDS = [
    "llm",
    "text-classification",
    "image-classification",
    "validate",
    "init",
    "schema",
    "migrate",
    "env",
    "chat",
    "predict",
    "evaluate",
    "export",
    "app",
]


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help(cli, command):
    result = cli(*([command] if command else []), "--help")
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output
    if command in (None, "llm", "text-classification", "image-classification"):  # the training commands
        assert all(option in result.output for option in ("--config", "--set", "--dry-run"))


def test_no_arguments_prints_help(cli):
    result = cli()
    assert result.exit_code == 0
    assert all(command in result.stdout for command in COMMANDS)


def test_version(cli):
    from autotrain import __version__

    result = cli("--version")
    assert (result.exit_code, result.stdout.strip()) == (0, f"autotrain {__version__}")


@pytest.mark.parametrize(
    "args",
    [["nosuch"], ["llm", "--bogus"], ["llm"], ["validate"], ["--config", str(SFT), "llm"]],
    ids=["unknown-command", "unknown-option", "no-config", "no-files", "config-before-command"],
)
def test_usage_errors_exit_2(cli, args):
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


# --- init ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("task", "trainer"), list(TEMPLATES), ids=[f"{t}-{tr}" if tr else t for t, tr in TEMPLATES])
def test_init_writes_a_template_that_validates(cli, tmp_path, task, trainer):
    out = tmp_path / "sub" / "config.yml"
    result = cli("init", task, *(["--trainer", trainer] if trainer else []), "-o", out)
    assert result.exit_code == 0, result.output

    text = out.read_text(encoding="utf-8")
    first, *rest = text.splitlines()
    template = (CONFIGS / TEMPLATES[(task, trainer)]).read_text(encoding="utf-8")
    # The copy is the template, with its "run:" comment naming the copy instead of the template.
    expected = template.replace(f"--config configs/{TEMPLATES[(task, trainer)]}", f"--config {out}", 1)
    assert rest == expected.splitlines()[1:]
    assert f"#   autotrain {task} --config {out}" in rest
    # The schema comment points at a schema file that exists, and the template satisfies it.
    uri = first.removeprefix("# yaml-language-server: $schema=")
    schema_file = Path(url2pathname(urlparse(uri).path))
    assert schema_file.name == f"{task}.schema.json" and schema_file.is_file()
    from autotrain.config.interpolate import interpolate

    data, _, _ = interpolate(yaml.safe_load(text), environ={})
    jsonschema.Draft202012Validator(json.loads(schema_file.read_text(encoding="utf-8"))).validate(data)

    checked = cli("validate", out)
    needs_data = NEEDS_DATA.get(TEMPLATES[(task, trainer)])
    if needs_data:  # the user's own corpus, still to come: validate says so as the dry run does
        field, message = needs_data.split(" ", 1)
        assert checked.exit_code == 2 and f": {field}: {message}" in checked.stderr, checked.output
        return
    trainer = trainer or data.get("trainer")  # a task with trainers of its own names one in its template
    kind = task + (f" ({trainer})" if trainer else "")
    assert (checked.exit_code, checked.stdout) == (0, f"{out}: ok: {kind}\n"), checked.output


def test_init_default_name_and_overwrite(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli("init", "llm", "--trainer", "dpo").exit_code == 0
    written = tmp_path / "llm-dpo.yml"
    assert written.is_file()

    written.write_text("mine\n", encoding="utf-8")
    refused = cli("init", "llm", "--trainer", "dpo")
    assert refused.exit_code == 2
    assert "exists" in refused.stderr and "--force" in refused.stderr
    assert written.read_text(encoding="utf-8") == "mine\n"

    forced = cli("init", "llm", "--trainer", "dpo", "--force")
    assert forced.exit_code == 0
    assert "trainer: dpo" in written.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["llms"], "unknown task `llms` (did you mean `llm`?)"),
        (["llm", "--trainer", "ppo"], "unknown trainer `ppo`"),
        (["text-classification", "--trainer", "sft"], "--trainer applies to `llm` only"),
    ],
)
def test_init_refuses_bad_input(cli, tmp_path, args, message):
    result = cli("init", *args, "-o", tmp_path / "x.yml")
    assert result.exit_code == 2
    assert message in result.stderr
    assert not (tmp_path / "x.yml").exists()


# --- schema -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["llm", "text-classification", "image-classification"])
def test_schema_is_a_valid_json_schema(cli, task, tmp_path):
    result = cli("schema", task)
    assert result.exit_code == 0
    schema = json.loads(result.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False
    assert cli("schema", task, "-o", tmp_path / "s.json").exit_code == 0
    assert json.loads((tmp_path / "s.json").read_text(encoding="utf-8")) == schema


def test_schema_unknown_task(cli):
    result = cli("schema", "text-clasification")
    assert result.exit_code == 2
    assert "did you mean `text-classification`" in result.stderr


# --- --dry-run and dispatch -----------------------------------------------------------------------------


def test_dry_run_prints_plan_and_writes_nothing(cli, tmp_path, monkeypatch):
    config = tmp_path / "quickstart.yml"
    text = (CONFIGS / "llm" / "quickstart.yml").read_text(encoding="utf-8")
    config.write_text(text.replace(" tests/assets/", f" {REPO_ROOT}/tests/assets/"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)

    result = cli("llm", "--config", config, "--dry-run", "--set", "training_args.gradient_accumulation=3")

    assert result.exit_code == 0, result.output
    assert "effective batch size: 24 = batch_size 8 x gradient_accumulation 3 x processes 1" in result.stdout
    assert resolved(result.stdout)["project_name"] == "runs/quickstart"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quickstart.yml"]  # no project folder


def test_dry_run_counts_processes(cli):
    result = cli("llm", "--config", SFT, "--dry-run", "--set", "distributed.num_processes=2", *cpu_sets("llm/sft.yml"))
    assert result.exit_code == 0, result.output
    assert "effective batch size: 32 = batch_size 4 x gradient_accumulation 4 x processes 2" in result.stdout


@pytest.mark.parametrize(
    ("config", "task_line"),
    [
        ("llm/sft.yml", "task: llm / trainer sft"),
        ("llm/llama3-orpo.yml", "task: llm / trainer orpo"),
        ("text-classification/imdb.yml", "task: text-classification"),
        ("image-classification/beans.yml", "task: image-classification"),
    ],
)
def test_root_config_dispatches_on_task(cli, config, task_line):
    here = cpu_sets(config)  # the ORPO template is for a GPU machine
    result = cli("--config", CONFIGS / config, "--dry-run", *here)
    assert result.exit_code == 0, result.output
    assert task_line in result.stdout.splitlines()
    task = task_line.split()[1]
    # The same as naming the command.
    assert cli(task, "--config", CONFIGS / config, "--dry-run", *here).stdout == result.stdout


def test_root_config_with_bad_config_exits_2(cli, tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(SFT.read_text(encoding="utf-8").replace("  lr: 2.0e-4", "  lr: 0"), encoding="utf-8")
    result = cli("--config", bad)
    assert result.exit_code == 2
    assert f"{bad}:27:3: training_args.lr: " in result.stderr


# --- --set --------------------------------------------------------------------------------------------


def test_set_overrides(cli):
    result = cli(
        "llm", "--config", CLM, "--dry-run",
        "--set", "training_args.lr=1e-4",  # a number, even in YAML 1.1 exponent form
        "--set", "training_args.max_grad_norm=null",
        "--set", "distributed.main_process_port=29600",  # nested
        "--set", "peft.r=8",  # creates the section
        "--set", "data.column_mapping.text=body",
        "--set", "training_args.batch_size=2",
        "--set", "training_args.batch_size=3",  # the last one wins
        "--set", "data.path=someone/corpus",  # a hub dataset (the template's local file is the user's to bring)
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    cfg = resolved(result.stdout)
    assert cfg["training_args"]["lr"] == pytest.approx(1e-4)
    assert cfg["training_args"]["max_grad_norm"] is None
    assert cfg["distributed"]["main_process_port"] == 29600
    assert cfg["peft"]["r"] == 8 and cfg["peft"]["enabled"] is True
    assert cfg["data"]["column_mapping"] == {"text": "body"}
    assert "batch_size 3 x" in result.stdout


def test_set_null_removes_a_section(cli):
    result = cli("llm", "--config", SFT, "--dry-run", "--set", "peft=null", *cpu_sets("llm/sft.yml"))
    assert result.exit_code == 0, result.output
    assert resolved(result.stdout)["peft"] is None


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("training_args.lr=0", "--set training_args.lr: must be greater than 0 (got `0`)"),
        ("training_args.batch_sise=4", "--set training_args.batch_sise: unknown key (did you mean `batch_size`?)"),
        ("peft.r=abc", "--set peft.r: must be a whole number (got `abc`)"),
        ("training_args.lr", "--set: `--set training_args.lr`: expected KEY.PATH=VALUE"),
        ("data.path.x=1", "--set data.path.x: cannot set a key inside `data.path`, which is not a section"),
        ("newsection.x=1", "--set newsection.x: newsection: unknown key"),
        (
            "hub.push_to_hub=true",
            "--set hub.push_to_hub: hub.repo_id: `hub.push_to_hub: true` needs `hub.repo_id`",
        ),
    ],
    ids=["bound", "typo", "type", "no-equals", "inside-scalar", "new-section", "cross-field"],
)
@pytest.mark.parametrize("command", ["validate", "llm"])
def test_set_errors_name_the_override(cli, command, override, line):
    args = ["validate", SFT] if command == "validate" else ["llm", "--config", SFT, "--dry-run"]
    result = cli(*args, "--set", override)
    assert result.exit_code == 2
    assert any(out.startswith(line) for out in result.stderr.splitlines()), result.stderr
    assert f"{SFT}:" not in result.stderr  # the file itself is fine
    where = line.split(":")[0]  # `--set PATH`: the path is said once, not again as `PATH:`
    assert not any(out.startswith(f"{where}: {where.removeprefix('--set ')}:") for out in result.stderr.splitlines())


# --- AutoTrain Advanced configs and migrate -------------------------------------------------------------


def test_migrate_advanced_orpo(cli, advanced, tmp_path):
    result = cli("migrate", advanced, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output  # `${HF_TOKEN}` is kept, not resolved
    native = yaml.safe_load(result.stdout)
    assert native["task"] == "llm" and native["trainer"] == "orpo"
    assert native["data"]["column_mapping"] == {
        "prompt": "prompt",
        "chosen": "chosen",
        "rejected": "rejected",
    }
    assert native["peft"] == {"enabled": True, "quantization": "int4", "target_modules": "all-linear"}
    args = native["training_args"]
    assert (args["max_length"], args["max_prompt_length"], args["gradient_accumulation"]) == (1024, 512, 4)
    assert native["hub"] == {
        "push_to_hub": True,
        "repo_id": "${HF_USERNAME}/autotrain-llama3-8b-orpo",
        "token": "${HF_TOKEN}",
    }

    migrated = tmp_path / "native.yml"
    migrated.write_text(result.stdout, encoding="utf-8")
    checked = cli("validate", migrated, env=HUB_ENV)
    assert (checked.exit_code, checked.stdout) == (0, f"{migrated}: ok: llm (orpo)\n"), checked.output
    assert "AutoTrain Advanced" not in checked.output
    unset = cli("validate", migrated, env=NO_HUB_ENV)
    assert unset.exit_code == 2 and "`HF_TOKEN` is not set" in unset.stderr


def test_migrate_to_file_refuses_overwrite(cli, advanced, tmp_path):
    out = tmp_path / "native.yml"
    assert cli("migrate", advanced, "-o", out).exit_code == 0
    assert yaml.safe_load(out.read_text(encoding="utf-8"))["trainer"] == "orpo"
    again = cli("migrate", advanced, "-o", out)
    assert again.exit_code == 2 and "exists" in again.stderr


def test_migrate_native_config_needs_no_migration(cli):
    result = cli("migrate", SFT)
    assert result.exit_code == 2
    assert "needs no migration" in result.stderr


@pytest.mark.parametrize("args", [["validate"], ["llm", "--dry-run", "--config"], ["--dry-run", "--config"]])
def test_advanced_config_is_accepted_with_a_notice(cli, advanced, args):
    if args != ["validate"]:  # a dry run on this CPU machine: what an AutoTrain Advanced GPU config needs
        sets = ["--set", "training_args.mixed_precision=no", "--set", "log=none"]  # it asks for fp16 and tensorboard
        args = [*args[:-1], *cpu_sets("llm/llama3-orpo.yml"), *sets, args[-1]]
    result = cli(*args, advanced, env=HUB_ENV)
    assert result.exit_code == 0, result.output
    notices = [line for line in result.output.splitlines() if "AutoTrain Advanced" in line]
    assert len(notices) == 1
    if args != ["validate"]:
        assert notices[0].startswith("note: ") and f"autotrain migrate {advanced}" in notices[0]
        assert "task: llm / trainer orpo" in result.stdout
        assert resolved(result.stdout)["hub"]["repo_id"] == "me/autotrain-llama3-8b-orpo"


def test_advanced_config_errors_point_at_original_lines(cli, advanced):
    advanced.write_text(ADVANCED_ORPO.replace("  batch_size: 2", "  batch_size: 0"), encoding="utf-8")
    result = cli("validate", advanced, env=HUB_ENV)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"{advanced}:22:3: training_args.batch_size: ")  # `params.batch_size`


# --- secrets ------------------------------------------------------------------------------------------


def test_secrets_never_printed(cli, tmp_path):
    config = tmp_path / "config.yml"
    text = SFT.read_text(encoding="utf-8") + "hub:\n  token: ${HF_TOKEN}\n"
    config.write_text(text.replace("HuggingFaceH4/no_robots", "${HF_TOKEN}/no_robots"), encoding="utf-8")

    result = cli("llm", "--config", config, "--dry-run", *cpu_sets("llm/sft.yml"), env={"HF_TOKEN": SECRET})
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    cfg = resolved(result.stdout)
    assert (cfg["hub"]["token"], cfg["data"]["path"]) == ("***", "***/no_robots")

    # A secret typed on the command line is redacted as well.
    result = cli("llm", "--config", SFT, "--dry-run", "--set", f"hub.token={SECRET}", *cpu_sets("llm/sft.yml"))
    assert result.exit_code == 0 and SECRET not in result.output

    # ... and so is one that ends up in an error message.
    bad = cli("validate", config, "--set", "training_args.seed=${HF_TOKEN}", env={"HF_TOKEN": SECRET})
    assert bad.exit_code == 2
    assert "training_args.seed" in bad.stderr and SECRET not in bad.output


# --- env ----------------------------------------------------------------------------------------------


def test_env(cli):
    result = cli("env")
    assert result.exit_code == 0, result.output
    rows = dict(line.split(None, 1) for line in result.stdout.splitlines() if line.strip())
    assert rows["torch"] != "not installed"
    assert {"autotrain", "python", "transformers", "trl", "peft", "gpus"} <= rows.keys()


# --- exit codes and debugging ---------------------------------------------------------------------------


def run_main(monkeypatch, *args):
    monkeypatch.setattr(sys, "argv", ["autotrain", *map(str, args)])
    with pytest.raises(SystemExit) as caught:
        cli_main.main()
    return caught.value.code


def test_unexpected_error_is_one_line_and_exit_1(monkeypatch, capsys):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("autotrain.config.load.load_config", boom)
    monkeypatch.delenv("AUTOTRAIN_DEBUG", raising=False)
    assert run_main(monkeypatch, "llm", "--config", SFT, "--dry-run") == 1
    err = capsys.readouterr().err
    assert "error: RuntimeError: boom" in err and "Traceback" not in err

    monkeypatch.setenv("AUTOTRAIN_DEBUG", "1")  # shows the real exception
    monkeypatch.setattr(sys, "argv", ["autotrain", "llm", "--config", str(SFT), "--dry-run"])
    with pytest.raises(RuntimeError, match="boom"):
        cli_main.main()


def test_interrupt_exits_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("autotrain.config.load.load_config", interrupted)
    assert run_main(monkeypatch, "validate", SFT) == 130
    assert "Traceback" not in capsys.readouterr().err


def test_debug_variable_changes_nothing_for_config_errors(cli, tmp_path):
    debug = {"AUTOTRAIN_DEBUG": "1"}
    assert cli("validate", SFT, env=debug).exit_code == 0
    assert cli("llm", "--config", SFT, "--dry-run", *cpu_sets("llm/sft.yml"), env=debug).exit_code == 0
    bad = tmp_path / "bad.yml"
    bad.write_text("task: llm\nbase_model: [x\n", encoding="utf-8")
    result = cli("llm", "--config", bad, "--dry-run", env=debug)
    assert result.exit_code == 2
    assert "invalid YAML" in result.stderr and "Traceback" not in result.output


def test_debug_variable_in_a_fresh_process():
    env = dict(os.environ, AUTOTRAIN_DEBUG="1")
    bad = REPO_ROOT / "tests" / "broken_configs" / "typo-training-args.yml"
    done = subprocess.run(
        [sys.executable, "-m", "autotrain.cli.main", "validate", str(SFT), str(bad)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "did you mean `gradient_accumulation`?" in done.stderr and "Traceback" not in done.stderr


# --- start-up -----------------------------------------------------------------------------------------

STARTUP = textwrap.dedent(
    """
    import json, sys
    from autotrain.cli.main import main

    sys.argv = ["autotrain", *sys.argv[1:]]
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    else:
        code = 0
    heavy = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(%r)))
    print("\\nRESULT " + json.dumps({"code": code, "heavy": heavy}))
    """
) % json.dumps(HEAVY)


@pytest.mark.parametrize("args", [["--help"], ["validate", "configs/llm/sft.yml"]], ids=["help", "validate"])
def test_startup_does_not_import_the_training_stack(args):
    done = subprocess.run(
        [sys.executable, "-c", STARTUP, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    result = json.loads(done.stdout.rsplit("\nRESULT ", 1)[1])
    assert result["code"] in (0, None), done.stdout + done.stderr
    assert result["heavy"] == [], f"`autotrain {' '.join(args)}` imported {result['heavy']}"


MISSING_PATHS = """\
task: llm
trainer: sft
base_model: ./my-model
project_name: runs/x
data:
  path: data/corpus.jsonl
  column_mapping: {text: text}
"""


def test_validate_names_a_local_path_that_is_not_here_as_the_run_does(cli, tmp_path, monkeypatch):
    """A base_model / data.path that only a path here can be, and is not: validate says at its line what the
    run's preflight says (exit 2), where it used to answer `ok` for a run that could not start."""
    from autotrain.config.load import load_config
    from autotrain.training.hub import missing_paths

    config = tmp_path / "c.yml"
    config.write_text(MISSING_PATHS)
    monkeypatch.chdir(tmp_path)
    result = cli("validate", config)
    assert result.exit_code == 2, result.output
    preflight = missing_paths(load_config(config).config)  # what the run says, one line each
    assert len(preflight) == 2 and f"folder you run from, {tmp_path}" in preflight[1], preflight
    for line_no, said in zip((3, 6), preflight, strict=True):
        field, message = said.split(" ", 1)
        assert f"{config}:{line_no}:" in result.stderr and f": {field}: {message}" in result.stderr, result.stderr
    (tmp_path / "my-model").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "corpus.jsonl").write_text('{"text": "hi"}\n')
    assert cli("validate", config).exit_code == 0


def test_validate_of_a_missing_local_path_imports_no_torch(tmp_path):
    config = tmp_path / "c.yml"
    config.write_text(MISSING_PATHS)
    done = subprocess.run(
        [sys.executable, "-c", STARTUP, "validate", str(config)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    result = json.loads(done.stdout.rsplit("\nRESULT ", 1)[1])
    assert result["code"] == 2 and "does not exist on this machine" in done.stderr, done.stderr
    assert result["heavy"] == [], result["heavy"]


def test_the_top_level_help_reads_no_config_schema():
    """`autotrain --help` lists the commands: it needs none of the config schemas (pydantic and the config
    models cost it 0.14 s of its start-up when a command module imported them for its help text)."""
    code = STARTUP.replace(json.dumps(HEAVY), json.dumps(["pydantic"]))
    assert code != STARTUP
    done = subprocess.run(
        [sys.executable, "-c", code, "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    result = json.loads(done.stdout.rsplit("\nRESULT ", 1)[1])
    assert result == {"code": 0, "heavy": []}, done.stdout + done.stderr


BUILT_SCHEMAS = textwrap.dedent(
    """
    import json, sys
    import pydantic
    from autotrain.cli.main import main

    sys.argv = ["autotrain", "validate", "configs/llm/sft.yml"]
    try:
        main()
    except SystemExit:
        pass
    modules = [sys.modules[name] for name in list(sys.modules) if name.startswith("autotrain.")]
    models = {c for m in modules for c in vars(m).values() if isinstance(c, type) and issubclass(c, pydantic.BaseModel)}
    print("\\nRESULT " + json.dumps(sorted(c.__name__ for c in models if c.__pydantic_complete__)))
    """
)


def test_validate_builds_only_the_schemas_its_config_uses():
    """pydantic builds a model's validator on its first use (`defer_build`): validating an LLM config that
    names fused_adam builds neither classifier's schema nor another optimizer's arguments. Building all of
    them on import took about 15 ms of validate's start-up."""
    done = subprocess.run(
        [sys.executable, "-c", BUILT_SCHEMAS], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    built = set(json.loads(done.stdout.rsplit("\nRESULT ", 1)[1]))
    assert "LLMConfig" in built and "FusedAdamArgs" in built, built
    unused = {"TextClassificationConfig", "ImageClassificationConfig", "CameArgs", "Came8BitArgs", "SgdArgs"}
    assert not built & unused, built


ENDING = """
import atexit, sys, threading, time
from autotrain.cli.ending import skip_teardown  # as the CLI imports it: before anything registers a handler

def log(line):
    with open(sys.argv[1], "a") as f:
        f.write(line + "\\n")

class TornDown:
    def __del__(self, path=sys.argv[1], open=open):  # what it needs, kept: the teardown clears the rest
        with open(path, "a") as f:
            f.write("teardown\\n")

kept = TornDown()  # a module global: released by the interpreter's teardown of the modules

def work():
    time.sleep(0.5)
    log("thread done")

threading.Thread(target=work).start()
atexit.register(log, "exit handler")
if sys.argv[2] == "skip":
    skip_teardown(3)
raise SystemExit(3)
"""


@pytest.mark.parametrize("skip", [True, False], ids=["teardown-skipped", "plain-exit"])
def test_a_process_ended_early_still_finishes_its_threads_and_exit_handlers(tmp_path, skip):
    """Launched ranks and read-only commands end without the interpreter's teardown of the modules
    (`skip_teardown`), yet first do what a normal exit does before it: a non-daemon thread is joined, and the
    exit handlers run, in that order; the exit code is kept. A plain exit (the control) tears down."""
    log = tmp_path / "log"
    argv = [sys.executable, "-c", ENDING, str(log), "skip" if skip else "plain"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    expected = ["thread done", "exit handler"] + ([] if skip else ["teardown"])
    assert log.read_text().splitlines() == expected


PROGRAM = """
import sys, types
sys.modules.setdefault("torch", types.ModuleType("torch"))  # stands for a dry run's torch, already loaded

class TornDown:
    def __del__(self, path=sys.argv[1], open=open):
        with open(path, "a") as f:
            f.write("teardown\\n")

kept = TornDown()
sys.argv = ["autotrain", "llm", "--config", sys.argv[2], "--dry-run"]
"""
AS_THE_PROGRAM = "from autotrain.cli.main import main\nmain()\n"  # as the console script runs it
CALLED = "import autotrain.cli.main as cli\ntry:\n    cli.main()\nexcept SystemExit:\n    print('went on')\n"


@pytest.mark.parametrize("runs", ["as-the-program", "called-by-other-code"])
def test_only_the_program_itself_skips_the_teardown(tmp_path, runs):
    """A read-only command skips the teardown when it is the program (the console script, `python -m`);
    called by other code that goes on (a test), it leaves that process's exit alone."""
    log, config = tmp_path / "log", tmp_path / "bad.yml"
    config.write_text("task: llm\nbase_model: [x\n")  # refused at once: exit 2
    code = PROGRAM + (AS_THE_PROGRAM if runs == "as-the-program" else CALLED)
    done = subprocess.run(
        [sys.executable, "-c", code, str(log), str(config)], capture_output=True, text=True, timeout=120
    )
    if runs == "as-the-program":
        assert done.returncode == 2 and not log.exists(), done.stderr
    else:
        assert done.returncode == 0 and done.stdout == "went on\n" and log.read_text() == "teardown\n", done.stderr


def test_a_message_as_exit_code_is_said_and_ends_with_1(tmp_path):
    code = (
        "from autotrain.cli.ending import skip_teardown\nskip_teardown('no such run')\nraise SystemExit('no such run')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.strip() == "no such run", done


# --- the templates run as they are ------------------------------------------------------------------------

SHIPPED = sorted(p.relative_to(CONFIGS).as_posix() for p in CONFIGS.glob("*/*.yml"))
NEEDS_CUDA = {  # QLoRA: 4-bit loading is CUDA only
    "llm/llama3-orpo.yml": "peft.quantization: int4",
    "vlm/vqav2-paligemma.yml": "peft.quantization: int4",
}
NEEDS_DATA = {  # continued pretraining on the user's own corpus: the dry run says the file is still to come
    "llm/clm.yml": "data.path `data/corpus.jsonl` does not exist on this machine",
}


@pytest.mark.parametrize("template", SHIPPED)
def test_every_shipped_template_dry_runs_on_a_plain_install(cli, monkeypatch, template):
    """A template used as it is passes its dry run on a plain install (no tensorboard, no extras) and writes
    its run under runs/; a GPU template on a machine without CUDA says only that."""
    import torch

    monkeypatch.chdir(REPO_ROOT)  # the quick starts read tests/assets relative to the clone
    cfg = yaml.safe_load((CONFIGS / template).read_text(encoding="utf-8"))
    assert cfg["project_name"].startswith("runs/"), cfg["project_name"]
    assert cfg.get("log", "none") == "none", "a template logs nowhere that needs a package the install lacks"
    result = cli(cfg["task"], "--config", CONFIGS / template, "--dry-run")
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    if template in NEEDS_CUDA and not torch.cuda.is_available():
        # only what 4-bit loading needs: a CUDA GPU, and bitsandbytes where it is not installed
        assert result.exit_code == 2 and errors and all(NEEDS_CUDA[template] in e for e in errors), result.output
    elif template in NEEDS_DATA:
        assert result.exit_code == 2 and len(errors) == 1 and NEEDS_DATA[template] in errors[0], result.output
        assert "base_model" not in errors[0], result.output
    else:
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("task", "trainer"), list(TEMPLATES), ids=[f"{t}-{tr}" if tr else t for t, tr in TEMPLATES])
def test_init_output_dry_runs_like_its_template(cli, tmp_path, monkeypatch, task, trainer):
    out = tmp_path / "config.yml"
    assert cli("init", task, *(["--trainer", trainer] if trainer else []), "-o", out).exit_code == 0
    monkeypatch.chdir(tmp_path)
    ours = cli(task, "--config", out, "--dry-run")
    theirs = cli(task, "--config", CONFIGS / TEMPLATES[(task, trainer)], "--dry-run")
    assert ours.exit_code == theirs.exit_code and ours.stderr == theirs.stderr, ours.output
