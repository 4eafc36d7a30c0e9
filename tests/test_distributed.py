"""More than one process: the launch command per strategy, the rule against CAME on flattened parameters,
and real runs of two CPU processes (gloo) through the CLI: one machine, two machines on loopback, and a
failing rank."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from autotrain.config.load import load_config
from autotrain.run import launch
from autotrain.run.distributed import DEEPSPEED_FILE, deepspeed_config, write_launch_files
from autotrain.run.launch import run_exit_code
from autotrain.training.plan import resolve_plan

ASSETS = Path(__file__).parent / "assets"
TINY = str(ASSETS / "tiny-llama")
ROWS = 8  # 8 rows / (batch 2 x 2 processes) = 2 optimizer steps; one process would take 4


def launch_command(loaded, sets, resume=None) -> list[str]:
    return launch.launch_command(loaded, resolve_plan(loaded.config), sets, resume)


def display_command(loaded, sets) -> str:
    return launch.display_command(loaded, resolve_plan(loaded.config), sets)


def write_data(path: Path) -> Path:
    lines = (ASSETS / "data" / "text.jsonl").read_text().splitlines()[:ROWS]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_config(tmp_path: Path, distributed: dict, data_path: str | None = None, **training) -> Path:
    config = {
        "task": "llm",
        "trainer": "sft",
        "base_model": TINY,
        "project_name": str(tmp_path / "run"),
        "data": {
            "path": data_path or str(write_data(tmp_path / "data.jsonl")),
            "column_mapping": {"text": "text"},
        },
        "training_args": {
            "epochs": 1,
            "batch_size": 2,
            "lr": 1e-3,
            "max_length": 32,
            "logging_steps": 1,
            "mixed_precision": "no",
            **training,
        },
        "distributed": distributed,
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(config))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cli_env() -> dict[str, str]:
    """CPU processes (gloo) whatever the host has, and no launcher state inherited from the caller."""
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOTRAIN_LAUNCHED", "RANK", "WORLD_SIZE")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def start(config: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(config), *args]
    return subprocess.Popen(
        command,
        cwd=config.parent,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=600)
    return process.returncode, out, err


def assert_trained_once(run: Path) -> None:
    """One set of loadable outputs, after 2 steps: the 2 processes shared the data."""
    state = json.loads((run / "trainer_state.json").read_text())
    assert state["global_step"] == 2, "the data was not split over 2 processes"
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert sorted(p.name for p in run.glob("*.safetensors")) == ["model.safetensors"]
    from safetensors.torch import load_file

    before, after = load_file(Path(TINY) / "model.safetensors"), load_file(run / "model.safetensors")
    assert all(not torch.equal(before[k], after[k]) for k in after), "some weights did not train"
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run)
    assert torch.isfinite(model(torch.tensor([[1, 5, 9]])).logits).all()


# --- the launch command ------------------------------------------------------------------------------


def parsed(command: list[str]):
    """The command as accelerate's own parser reads it: every flag exists, the script's args survive."""
    from accelerate.commands.launch import launch_command_parser

    assert command[1:3] == ["-m", "accelerate.commands.launch"]
    return launch_command_parser().parse_args(command[3:])


def test_ddp_command_forwards_config_sets_and_resume(tmp_path):
    loaded = load_config(write_config(tmp_path, {"num_processes": 2}))
    command = launch_command(loaded, ["training_args.lr=1e-4"], resume="latest")
    args = parsed(command)
    assert args.multi_gpu and not args.use_fsdp and not args.use_deepspeed and not args.cpu
    assert (args.num_processes, args.num_machines, args.main_process_port) == (2, 1, 29500)
    assert args.module and args.training_script == "autotrain.cli.main"
    assert args.training_script_args == [
        "llm",
        "--config",
        loaded.source,
        "--set",
        "training_args.lr=1e-4",
        "--resume",
        "latest",
    ]


def test_displayed_command_hides_secrets(tmp_path):
    loaded = load_config(write_config(tmp_path, {"num_processes": 2}), ["hub.token=hf_abc"])
    shown = display_command(loaded, ["hub.token=hf_abc", "training_args.lr=1e-4"])
    assert "hf_abc" not in shown and "--set 'hub.token=***' --set training_args.lr=1e-4" in shown


def test_multi_node_command(tmp_path):
    dist = {
        "num_processes": 4,
        "num_machines": 2,
        "machine_rank": 1,
        "main_process_ip": "10.0.0.1",
        "main_process_port": 29555,
    }
    args = parsed(launch_command(load_config(write_config(tmp_path, dist)), []))
    # accelerate counts processes over all machines
    assert (args.num_processes, args.num_machines, args.machine_rank) == (8, 2, 1)
    assert (args.main_process_ip, args.main_process_port) == ("10.0.0.1", 29555)


def test_fsdp_command_wraps_the_decoder_layers(tmp_path):
    dist = {"num_processes": 2, "strategy": "fsdp", "fsdp": {"cpu_offload": True}}
    args = parsed(launch_command(load_config(write_config(tmp_path, dist)), []))
    assert args.use_fsdp and args.fsdp_version == "2"
    assert args.fsdp_auto_wrap_policy == "TRANSFORMER_BASED_WRAP"
    assert args.fsdp_transformer_layer_cls_to_wrap == "LlamaDecoderLayer"  # the model's _no_split_modules
    assert (args.fsdp_reshard_after_forward, args.fsdp_offload_params) == ("true", "true")
    assert args.fsdp_state_dict_type == "FULL_STATE_DICT"


def test_fsdp1_command_names_the_sharding_strategy(tmp_path):
    dist = {
        "num_processes": 2,
        "strategy": "fsdp",
        "fsdp": {"version": 1, "reshard_after_forward": False, "auto_wrap": False},
    }
    args = parsed(launch_command(load_config(write_config(tmp_path, dist)), []))
    assert args.fsdp_version == "1" and args.fsdp_reshard_after_forward == "SHARD_GRAD_OP"
    assert args.fsdp_auto_wrap_policy == "NO_WRAP" and args.fsdp_transformer_layer_cls_to_wrap is None


def test_deepspeed_command_and_generated_config(tmp_path):
    dist = {
        "num_processes": 2,
        "num_machines": 2,
        "main_process_ip": "10.0.0.1",
        "strategy": "deepspeed",
        "deepspeed": {"stage": 3, "offload_optimizer": True},
    }
    loaded = load_config(write_config(tmp_path, dist))
    args = parsed(launch_command(loaded, []))
    target = tmp_path / "run" / DEEPSPEED_FILE
    assert args.use_deepspeed and args.deepspeed_config_file == str(target)
    assert args.deepspeed_multinode_launcher == "standard"
    assert not target.exists(), "building the command must not write the file"
    assert write_launch_files(loaded.config) == [target]
    written = json.loads(target.read_text())
    assert written == deepspeed_config(loaded.config.distributed.deepspeed)
    zero = written["zero_optimization"]
    assert zero["stage"] == 3 and zero["offload_optimizer"]["device"] == "cpu"
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True
    # sizes come from training_args through the Trainer, so they can never disagree
    assert written["gradient_accumulation_steps"] == written["train_micro_batch_size_per_gpu"] == "auto"


def test_deepspeed_user_file_is_used_as_is(tmp_path):
    own = tmp_path / "mine.json"
    own.write_text("{}")
    dist = {"num_processes": 2, "strategy": "deepspeed", "deepspeed": {"config_file": str(own)}}
    loaded = load_config(write_config(tmp_path, dist))
    assert parsed(launch_command(loaded, [])).deepspeed_config_file == str(own)
    assert write_launch_files(loaded.config) == []


def test_dry_run_prints_the_launch_command_and_writes_nothing(tmp_path, cli):
    config = write_config(tmp_path, {"num_processes": 2})
    before = sorted(tmp_path.rglob("*"))
    result = cli("llm", "--config", config, "--dry-run")
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if x.startswith("launch: "))
    assert "-m accelerate.commands.launch --num_processes 2 --num_machines 1" in line
    assert line.endswith(f"-m autotrain.cli.main llm --config {config}")
    assert "processes 2" in result.stdout  # effective batch size counts both processes
    assert sorted(tmp_path.rglob("*")) == before


# --- refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "distributed, named",
    [
        ({"strategy": "deepspeed"}, "distributed.strategy: deepspeed"),
        ({"strategy": "fsdp", "fsdp": {"version": 1}}, "distributed.fsdp.version: 1"),
    ],
    ids=["deepspeed", "fsdp1"],
)
@pytest.mark.parametrize("optimizer", ["came", "came_8bit", "came_8bit+fused_adam"])
def test_came_is_refused_where_parameters_are_flattened(tmp_path, cli, distributed, named, optimizer):
    # ZeRO and FSDP1 hand the optimizer 1-D buffers: CAME's factored statistics would silently turn off.
    config = write_config(tmp_path, {"num_processes": 2, **distributed}, optimizer=optimizer)
    result = cli("llm", "--config", config)
    assert result.exit_code == 2
    assert "training_args.optimizer" in result.stderr and named in result.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "strategy, optimizer",
    [
        ("ddp", "came_8bit"),
        ("ddp", "fused_adam"),
        # FSDP2 keeps each param's shape (dim-0 shards), which the CAME optimizers handle exactly.
        ("fsdp", "came"),
        ("fsdp", "came_8bit"),
        ("fsdp", "came_8bit+fused_adam"),
    ],
)
def test_bundled_optimizers_are_accepted(tmp_path, cli, strategy, optimizer):
    config = write_config(tmp_path, {"num_processes": 2, "strategy": strategy}, optimizer=optimizer)
    result = cli("validate", config)
    assert result.exit_code == 0, result.output


@pytest.mark.no_cuda
@pytest.mark.parametrize("strategy", ["fsdp", "deepspeed"])
def test_sharding_without_gpus_is_refused_before_launch(tmp_path, cli, strategy):
    # accelerate would quietly run FSDP on CPU processes as plain data parallel copies
    result = cli("llm", "--config", write_config(tmp_path, {"num_processes": 2, "strategy": strategy}))
    assert result.exit_code == 2
    assert f"distributed.strategy: {strategy} needs CUDA GPUs" in result.stderr


@pytest.mark.parametrize(
    "codes, first, expected",
    [
        ({1: 2}, 1, 2),  # a rank's bad input is the run's bad input
        ({0: 3, 1: -15}, 0, 3),  # diverged; the sibling was stopped by the agent
        ({0: -15, 1: 2}, 0, 2),
        ({0: 1}, 0, 1),
        ({0: -9}, 0, 1),  # killed (e.g. out of memory)
        ({0: -2}, 0, 130),
        ({1: 143}, 1, 143),
        ({1: 1, 0: -15}, 1, 1),  # rank 1 failed; rank 0, stopped by the agent, must not turn it into 143
        ({1: 1, 0: 143}, 1, 1),
        ({0: -15, 1: 1}, 0, 143),  # the signal came first (sent to a rank): the others broke on it
    ],
)
def test_run_exit_code(codes, first, expected):
    assert run_exit_code(codes, first) == expected


# --- real runs: two CPU processes ---------------------------------------------------------------------


@pytest.mark.slow
def test_ddp_two_processes_on_cpu(tmp_path):
    code, out, err = finish(start(write_config(tmp_path, {"num_processes": 2, "strategy": "ddp"})))
    assert code == 0, err
    assert "launching 2 processes (ddp)" in err
    assert out.count("training: 2 steps") == 1, "only the main process draws progress"
    assert_trained_once(tmp_path / "run")


@pytest.mark.slow
def test_two_machines_on_loopback(tmp_path):
    port = free_port()
    dist = {"num_processes": 1, "num_machines": 2, "main_process_ip": "127.0.0.1", "main_process_port": port}
    config = write_config(tmp_path, dist)
    machines = [start(config, "--set", f"distributed.machine_rank={rank}") for rank in (0, 1)]
    results = [finish(p) for p in machines]
    logs = "\n".join(f"--- machine {rank} (exit {code}):\n{err}" for rank, (code, _, err) in enumerate(results))
    assert [code for code, _, _ in results] == [0, 0], logs  # in full: pytest shortens a list's repr
    assert "this is machine 1" in results[1][2]
    assert_trained_once(tmp_path / "run")


@pytest.mark.slow
def test_a_failing_rank_fails_the_run(tmp_path):
    # Only rank 1 (RANK comes from the launcher) reads a missing file: a bad input at training time that
    # the parent, which sees RANK unset, cannot catch. The other rank is stopped; the run keeps code 2.
    write_data(tmp_path / "data-0.jsonl")
    config = write_config(tmp_path, {"num_processes": 2}, data_path=str(tmp_path / "data-${RANK:-0}.jsonl"))
    code, _, err = finish(start(config))
    assert code == 2, err
    assert "data-1.jsonl` does not exist" in err
    assert "rank 1 of 2 exited with code 2" in err
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_a_ray_worker_loads_the_config_as_the_driver_did(tmp_path, monkeypatch):
    """A config without `task:`, run as `autotrain llm --config F`: each Ray worker loads it again from the
    file, and must know the task the command named (it has no command line of its own)."""
    from autotrain.run.ray_launch import worker_config, worker_payload

    path = write_config(tmp_path, {"num_processes": 2})
    path.write_text("".join(line for line in path.read_text().splitlines(True) if not line.startswith("task:")))
    loaded = load_config(path, ["training_args.lr=1e-4"], expected_task="llm")
    payload = worker_payload(loaded, ["training_args.lr=1e-4"], None, tmp_path / "stop")
    monkeypatch.chdir(payload["cwd"])
    again = worker_config(payload)
    assert again.config == loaded.config and again.config.task == "llm"
