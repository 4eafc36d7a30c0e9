"""Multi-node runs that cannot meet fail in seconds with one line naming who came, not with a silent hang.

Real `autotrain llm` processes on loopback ("machines" of one host), gloo on the CPU. Each fault is timed
from the start of the processes to their exit with the named error (target: under 60 s; the tests use
`rendezvous_timeout: 15`).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from test_distributed import finish, free_port, start, write_config

from autotrain.config.base import DistributedConfig
from autotrain.run.rendezvous import NETWORK_ENV, network_env

TIMEOUT = 15


def machines(tmp_path, *sets_per_machine: list[str], port: int | None = None):
    dist = {
        "num_processes": 1,
        "num_machines": 2,
        "main_process_ip": "127.0.0.1",
        "main_process_port": port or free_port(),
        "rendezvous_timeout": TIMEOUT,
    }
    config = write_config(tmp_path, dist)
    began = time.monotonic()
    processes = [start(config, *(a for s in sets for a in ("--set", s))) for sets in sets_per_machine]
    results = []
    for process in processes:
        code, _, err = finish(process)
        results.append((code, err, time.monotonic() - began))
    return results


def error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error: rendezvous")]
    assert len(lines) == 1, err
    return lines[0]


def assert_named(code: int, err: str, seconds: float, *expected: str) -> str:
    assert code == 2, err
    line = error_line(err)
    for text in expected:
        assert text in line, line
    assert "NCCL_SOCKET_IFNAME=" in line and "GLOO_SOCKET_IFNAME=" in line, line
    assert "Traceback" not in err, err
    assert seconds < 60, f"the named error took {seconds:.1f} s"
    print(f"\n{seconds:5.1f} s  {line}")
    return line


def test_network_env_lists_every_setting():
    shown = network_env({"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"})
    assert "NCCL_SOCKET_IFNAME=eth0" in shown and "NCCL_IB_DISABLE=1" in shown
    assert "GLOO_SOCKET_IFNAME=(unset)" in shown
    assert all(f"{name}=" in shown for name in NETWORK_ENV)


def test_timeout_is_configurable_and_bounded():
    assert DistributedConfig().rendezvous_timeout == 60
    with pytest.raises(ValueError):
        DistributedConfig(rendezvous_timeout=0)


@pytest.mark.slow
def test_a_missing_machine_is_named(tmp_path):
    [(code, err, seconds)] = machines(tmp_path, ["distributed.machine_rank=0"])
    assert_named(code, err, seconds, "expected 2 machines", "arrived: node 0 from 127.0.0.1", "machine(s) 1 did not")


@pytest.mark.slow
def test_a_wrong_port_is_named_on_both_machines(tmp_path):
    port, wrong = free_port(), free_port()
    node0, node1 = machines(
        tmp_path,
        ["distributed.machine_rank=0"],
        ["distributed.machine_rank=1", f"distributed.main_process_port={wrong}"],
        port=port,
    )
    assert_named(*node0, f"at 127.0.0.1:{port}", "arrived: node 0 from", "machine(s) 1 did not check in")
    assert_named(*node1, f"could not reach machine 0's rendezvous at 127.0.0.1:{wrong}", "arrived: none seen")


@pytest.mark.slow
def test_a_wrong_num_machines_is_named_on_both_machines(tmp_path):
    node0, node1 = machines(
        tmp_path,
        ["distributed.machine_rank=0"],
        ["distributed.machine_rank=1", "distributed.num_machines=3"],
    )
    assert_named(*node0, "node 1 from 127.0.0.1", "says num_machines 3", "this machine says 2")
    assert_named(*node1, "node 0 from 127.0.0.1", "says num_machines 2", "this machine says 3")


class _Store:
    """A store in memory, like TCPStore's client: `add`, `set`, `get`, `check`; `drop_after` operations it
    raises what TCPStore raises when machine 0 has gone."""

    def __init__(self, drop_after: int | None = None):
        self.values, self.calls, self.drop_after = {}, 0, drop_after

    def _op(self):
        self.calls += 1
        if self.drop_after is not None and self.calls > self.drop_after:
            raise torch_dist().DistNetworkError("Failed to recv, got 0 bytes. Connection was likely closed.")

    def add(self, key, amount):
        self._op()
        self.values[key] = int(self.values.get(key, 0)) + amount
        return self.values[key]

    def set(self, key, value):
        self._op()
        self.values[key] = value

    def get(self, key):
        self._op()
        return self.values[key]

    def check(self, keys):
        self._op()
        return all(key in self.values for key in keys)


def torch_dist():
    import torch.distributed

    return torch.distributed


def test_a_machine_that_loses_machine_0_mid_wait_names_it(monkeypatch):
    """Machine 0 stopped (it saw a problem) while this machine was still reading: a named line, exit 2."""
    from autotrain.run import rendezvous

    monkeypatch.setattr(rendezvous, "_connect", lambda *a: _Store(drop_after=4))
    dist = DistributedConfig(num_machines=2, machine_rank=1, main_process_ip="127.0.0.1", rendezvous_timeout=15)
    with pytest.raises(rendezvous.RendezvousError, match="machine 0's rendezvous closed while this machine waited"):
        rendezvous.check_in(dist)


def test_machine_0_keeps_the_store_until_the_others_have_read_the_problem(monkeypatch):
    """Machine 0 saw a wrong num_machines; it stops only once machine 1 said it stopped too (or after 5 s)."""
    from autotrain.run import rendezvous

    store = _Store()
    store.values[f"{rendezvous.PREFIX}count"] = 1
    store.values[f"{rendezvous.PREFIX}arrival/1"] = '{"rank": 1, "num_machines": 3, "host": "b", "address": "x"}'
    monkeypatch.setattr(rendezvous, "_serve", lambda *a: store)
    waited = []
    sleep = time.sleep

    def machine_1_stops_later(seconds):
        waited.append(seconds)
        if len(waited) == 3:
            store.values[f"{rendezvous.PREFIX}stopped/1"] = "1"
        sleep(0)

    monkeypatch.setattr(rendezvous.time, "sleep", machine_1_stops_later)
    dist = DistributedConfig(num_machines=2, machine_rank=0, main_process_ip="127.0.0.1", rendezvous_timeout=15)
    with pytest.raises(rendezvous.RendezvousError, match="says num_machines 3"):
        rendezvous.check_in(dist)
    assert len(waited) == 3, "machine 0 stopped before machine 1 had read the problem, or waited on after it"
    assert store.values[f"{rendezvous.PREFIX}stopped/0"] == "1"


@pytest.mark.slow
def test_a_port_in_use_on_machine_0_is_refused(tmp_path):
    port = free_port()
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", port))
        holder.listen()
        [(code, err, seconds)] = machines(tmp_path, ["distributed.machine_rank=0"], port=port)
    assert code == 2, err
    assert f"distributed.main_process_port: port {port} on this machine (machine 0) is already in use" in err
    assert "Traceback" not in err and seconds < 60
    assert not (tmp_path / "run").exists(), "a refused run leaves no project folder"


@pytest.mark.slow
def test_a_wrong_interface_fails_every_rank_with_the_setting_named(tmp_path):
    # The processes meet (one machine), but gloo is told to use an interface this host does not have:
    # the all-reduce each rank does before loading the model reports it instead of the first training step.
    import os
    import subprocess
    import sys

    from test_distributed import cli_env

    config = write_config(tmp_path, {"num_processes": 2, "rendezvous_timeout": TIMEOUT})
    env = {**cli_env(), "GLOO_SOCKET_IFNAME": "nosuch0"}
    began = time.monotonic()
    process = subprocess.run(
        [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.fspath(tmp_path),
    )
    seconds = time.monotonic() - began
    assert process.returncode == 2, process.stderr
    line = next(x for x in process.stderr.splitlines() if x.startswith("error: rank") and "gloo group" in x)
    assert "Unable to find address for: nosuch0" in line and "GLOO_SOCKET_IFNAME=nosuch0" in line, line
    assert "Traceback" not in process.stderr and seconds < 60
    assert not (tmp_path / "run" / "model.safetensors").exists()
    print(f"\n{seconds:5.1f} s  {line}")


@pytest.mark.slow
def test_another_service_on_the_port_is_named(tmp_path):
    # Something else listens where machine 0 should be (it answers, but not as a TCPStore).
    import threading

    from autotrain.run.rendezvous import RendezvousError, check_in

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def answer_garbage():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" * 4)

    threading.Thread(target=answer_garbage, daemon=True).start()
    dist = DistributedConfig(
        num_machines=2, machine_rank=1, main_process_ip="127.0.0.1", main_process_port=port, rendezvous_timeout=5
    )
    began = time.monotonic()
    with pytest.raises(RendezvousError, match=f"127.0.0.1:{port} answers but is not machine 0's rendezvous"):
        check_in(dist)
    server.close()
    assert time.monotonic() - began < 60


# --- every transport of the run, on a GPU host: the check-in's own processes, a store the test serves ------

# One rank's check-in (run.rendezvous.check_ranks), as a launched rank runs it before the model loads.
# FAKE_GPU=1 stands for a GPU host: CUDA reported present and the NCCL all-reduce taken as done, so what is
# left is what the check-in does beside it.
RANK_SCRIPT = """
import json, os, sys
import torch
from autotrain.run import rendezvous

if os.environ.get("FAKE_GPU") == "1":
    torch.cuda.is_available = lambda: True
    real = rendezvous._all_reduce_once

    def nccl_done(store, rank, world, timeout, cuda, environ, *rest):
        return True if cuda else real(store, rank, world, timeout, cuda, environ, *rest)

    rendezvous._all_reduce_once = nccl_done
plan = {"plan": json.loads(os.environ["PLAN"])} if "PLAN" in os.environ else {}
try:
    rendezvous.check_ranks(int(os.environ["CHECK_TIMEOUT"]), **plan)
except rendezvous.RendezvousError as exc:
    print(f"error: {exc}", file=sys.stderr)
    sys.exit(2)
print("checked in", file=sys.stderr)
"""


def check_in_ranks(ranks: list[dict[str, str]], world: int = 2, timeout: int = TIMEOUT):
    """Run `check_ranks` in one process per entry of `ranks` (its extra environment) against a store this
    test serves as the launcher would; returns (exit code, stderr, seconds) per process."""
    import datetime
    import os
    import subprocess
    import sys

    from test_distributed import cli_env
    from torch.distributed import TCPStore

    port = free_port()
    store = TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=60), wait_for_workers=False)
    base = {**cli_env(), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    began = time.monotonic()
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT],
            env={**base, "RANK": str(rank), "CHECK_TIMEOUT": str(timeout), **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=os.fspath(Path(__file__).resolve().parents[1]),
        )
        for rank, extra in enumerate(ranks)
    ]
    results = []
    for process in processes:
        try:
            _, err = process.communicate(timeout=timeout + 120)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            raise AssertionError(f"a rank's check-in still ran {timeout + 120} s after it started") from None
        results.append((process.returncode, err, time.monotonic() - began))
    del store
    return results


@pytest.mark.slow
def test_a_wrong_gloo_interface_on_a_gpu_host_is_named_on_every_rank():
    # The stop flag and the ranks' agreed decisions use a gloo group beside NCCL: a check-in that tested
    # NCCL alone let a wrong GLOO_SOCKET_IFNAME through, to hang for gloo's 30 minutes once training began.
    wrong = {"FAKE_GPU": "1", "GLOO_SOCKET_IFNAME": "nosuch0"}
    for code, err, seconds in check_in_ranks([wrong, wrong]):
        assert code == 2, err
        line = next(x for x in err.splitlines() if x.startswith("error: rank"))
        assert "the gloo group could not form" in line and "nosuch0" in line, line
        assert "GLOO_SOCKET_IFNAME=nosuch0" in line and "Traceback" not in err, err
        assert seconds < TIMEOUT + 60, f"the named error took {seconds:.1f} s"


@pytest.mark.slow
def test_a_rank_that_never_joins_gloo_on_a_gpu_host_is_named_within_the_timeout():
    # Rank 1 never comes: rank 0 waits in the gloo group's forming until the check-in's deadline.
    [(code, err, seconds)] = check_in_ranks([{"FAKE_GPU": "1"}], timeout=10)
    assert code == 2, err
    line = next(x for x in err.splitlines() if x.startswith("error: rank 0 of 2"))
    assert "the gloo all-reduce over 2 processes did not finish within 10 s" in line, line
    assert "missing 1" in line, line
    assert 10 <= seconds < 10 + 60, f"the named error took {seconds:.1f} s"


@pytest.mark.slow
def test_ranks_whose_plans_differ_stop_with_the_fields_named():
    # A machine without flash-attn would batch rows where the others batch one sequence: other collectives.
    import json

    plan = {"padding_free": "one sequence", "precision": {"device": "cuda"}, "world_size": 2}
    other = {**plan, "padding_free": "rows"}
    first, second = check_in_ranks([{"PLAN": json.dumps(plan)}, {"PLAN": json.dumps(other)}])
    for code, err, _ in (first, second):
        assert code == 2 and "Traceback" not in err, err
        assert "the processes resolved different run plans" in err, err
    assert "another rank's does not" in first[1], first[1]
    assert "padding_free: 'rows' here, 'one sequence' on rank 0" in second[1], second[1]
    same = check_in_ranks([{"PLAN": json.dumps(plan)}, {"PLAN": json.dumps(plan)}])
    assert [code for code, _, _ in same] == [0, 0], same
