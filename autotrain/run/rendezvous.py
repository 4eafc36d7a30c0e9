"""Machines check in before anything heavy starts, so a multi-node run fails in seconds, not in 30 minutes.

Without this, a machine that cannot reach machine 0 (wrong address, wrong port, a firewall, a machine that
never started, a different `num_machines`) shows up as a silent stall: torch's static rendezvous waits
600 s, then the process group's collectives wait out their own timeout (30 min by default).

Here each machine's `autotrain` process, before it loads the training stack, joins a TCPStore at
`main_process_ip:main_process_port` (machine 0 serves it), writes who it is (machine rank, host, the
address it reaches machine 0 from, `num_machines`), and waits for the others until
`distributed.rendezvous_timeout` seconds after it started. Every machine that is up then stops with the
same kind of line: what was expected, what arrived, and the network settings NCCL and gloo will use,
and has exited by `rendezvous_timeout` seconds after its start (it stops waiting 2 s before, to say so;
machine 0 then keeps the store up at most 5 s more, until the machines that came have read the problem).

Machine 0 keeps serving the store afterwards: it is created `multi_tenant`, so the launcher's own
rendezvous (the torch elastic agent, in this same process, on the same port) reuses the server rather
than binding the port again, and no machine can ever reach a store that is about to close.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass

from autotrain.config.base import DistributedConfig
from autotrain.errors import UserInputError

PREFIX = "autotrain/rendezvous/"
# What decides which interface and transport NCCL / gloo use: shown with every rendezvous problem.
NETWORK_ENV = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "NCCL_IB_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_NET",
    "NCCL_P2P_DISABLE",
    "NCCL_DEBUG",
)
_POLL = 0.2
_MIN_WAIT = 10.0  # however long the start took, wait at least this long for the others
# The timeout is when the named error must be out: stop waiting this much earlier, for the line and the exit.
_EXIT_RESERVE = 2.0
# After a problem, how long machine 0 keeps the store up for the others to read it and stop with their own line.
_SETTLE = 5.0


class RendezvousError(UserInputError):
    """The machines of a multi-node run did not all check in (exit code 2)."""


@dataclass(frozen=True)
class Arrival:
    rank: int
    num_machines: int
    host: str
    address: str

    def describe(self) -> str:
        return f"node {self.rank} from {self.address} ({self.host})"


def network_env(environ=os.environ) -> str:
    return " ".join(f"{name}={environ.get(name, '(unset)')}" for name in NETWORK_ENV)


def process_age() -> float:
    """Seconds since this process started (Linux /proc), else 0: the timeout counts from the start."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as uptime:
            up = float(uptime.read().split()[0])
        return max(0.0, up - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def local_address(host: str, port: int) -> str:
    """The address this machine reaches `host` from (the interface its route to machine 0 goes out of)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))  # UDP: picks the route, sends nothing
        return probe.getsockname()[0]
    return "unknown address"


def check_in(dist: DistributedConfig, processes: int = 1):
    """Wait until every machine of `dist` has checked in; returns the store (keep it while the run lasts).

    Raises RendezvousError naming what was expected and what arrived.
    """
    timeout = dist.rendezvous_timeout
    deadline = time.monotonic() + max(timeout - _EXIT_RESERVE - process_age(), min(_MIN_WAIT, timeout))
    host, port = str(dist.main_process_ip), dist.main_process_port
    where = f"{host}:{port}"
    me = Arrival(dist.machine_rank, dist.num_machines, socket.gethostname(), local_address(host, port))
    store = _serve(port, timeout) if dist.machine_rank == 0 else _connect(host, port, deadline, me, timeout)
    if store.add(f"{PREFIX}claims/{me.rank}", 1) > 1:
        raise _failure(f"two machines say they are machine_rank {me.rank} (the other is not this one)", me, where)
    index = store.add(f"{PREFIX}count", 1)
    store.set(f"{PREFIX}arrival/{index}", json.dumps(asdict(me)))
    try:
        arrived = _wait(store, me, deadline, where, timeout)
    except RendezvousError:
        _settle(store, me)
        raise
    except RuntimeError as exc:  # the store's connection dropped: machine 0 stopped before this one saw why
        raise _failure(
            f"machine 0's rendezvous closed while this machine waited ({str(exc).strip().splitlines()[0]}); "
            "machine 0 stopped: its own error says why",
            me,
            where,
            timeout,
        ) from None
    ranks = ", ".join(str(a.rank) for a in arrived)
    print(f"rendezvous: all {me.num_machines} machines checked in at {where} (nodes {ranks})", flush=True)
    return store


def _serve(port: int, timeout: int):
    from torch.distributed import TCPStore

    try:
        return TCPStore(
            "0.0.0.0",
            port,
            None,
            True,
            datetime.timedelta(seconds=timeout),
            wait_for_workers=False,
            multi_tenant=True,
        )
    except RuntimeError as exc:
        if "EADDRINUSE" in str(exc) or "address already in use" in str(exc):
            raise RendezvousError(
                f"distributed.main_process_port: port {port} on this machine (machine 0) is already in use; "
                "stop what holds it or choose another port"
            ) from None
        raise


def _connect(host: str, port: int, deadline: float, me: Arrival, timeout: int):
    """A plain TCP connect first (quiet, and its error says why), then the store client."""
    from torch.distributed import TCPStore

    reason = "no answer"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _failure(
                f"could not reach machine 0's rendezvous at {host}:{port} ({reason}); is machine 0 started, are "
                "distributed.main_process_ip and main_process_port right, is the port open between the machines?",
                me,
                f"{host}:{port}",
                timeout,
            )
        try:
            with socket.create_connection((host, port), timeout=min(5.0, left)):
                break
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    try:
        return TCPStore(host, port, None, False, datetime.timedelta(seconds=max(1.0, deadline - time.monotonic())))
    except RuntimeError as exc:  # something answers on that port, but not machine 0's store
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _failure(
            f"{host}:{port} answers but is not machine 0's rendezvous ({first}); is the port right?",
            me,
            f"{host}:{port}",
            timeout,
        ) from None


def _settle(store, me: Arrival) -> None:
    """Before a machine that found a problem stops: say so, and machine 0 (which serves the store) waits
    until every machine that arrived has said so too, at most _SETTLE s, so that none of them loses the
    store before it could read what went wrong and name it itself."""
    with contextlib.suppress(RuntimeError):
        store.set(f"{PREFIX}stopped/{me.rank}", "1")
        if me.rank != 0:
            return
        until = time.monotonic() + _SETTLE
        while time.monotonic() < until:
            others = {a.rank for a in _read(store, [])} - {0}
            if all(store.check([f"{PREFIX}stopped/{rank}"]) for rank in others):
                return
            time.sleep(_POLL)


def _read(store, seen: list[Arrival]) -> list[Arrival]:
    count = int(store.add(f"{PREFIX}count", 0))
    for index in range(len(seen) + 1, count + 1):
        seen.append(Arrival(**json.loads(store.get(f"{PREFIX}arrival/{index}"))))
    return seen


def _wait(store, me: Arrival, deadline: float, where: str, timeout: int) -> list[Arrival]:
    seen: list[Arrival] = []
    while True:
        arrived = _read(store, seen)
        wrong = [a for a in arrived if a.num_machines != me.num_machines or a.rank >= me.num_machines]
        if wrong:
            other = wrong[0]
            raise _failure(
                f"{other.describe()} says num_machines {other.num_machines} (machine_rank {other.rank}), this "
                f"machine says {me.num_machines}; give every machine the same distributed.num_machines",
                me,
                where,
                timeout,
                arrived,
            )
        if {a.rank for a in arrived} >= set(range(me.num_machines)):
            return sorted(arrived, key=lambda a: a.rank)
        if time.monotonic() >= deadline:
            missing = sorted(set(range(me.num_machines)) - {a.rank for a in arrived})
            raise _failure(
                f"machine(s) {', '.join(map(str, missing))} did not check in; are they started, and do they use "
                "the same main_process_ip and main_process_port?",
                me,
                where,
                timeout,
                arrived,
            )
        time.sleep(_POLL)


def _failure(
    problem: str, me: Arrival, where: str, timeout: int | None = None, arrived: list[Arrival] | None = None
) -> RendezvousError:
    came = "; ".join(a.describe() for a in sorted(arrived, key=lambda a: a.rank)) if arrived else "none seen"
    within = f" within {timeout} s (distributed.rendezvous_timeout)" if timeout else ""
    return RendezvousError(
        f"rendezvous at {where} failed{within} on machine {me.rank} ({me.host}, {me.address}): expected "
        f"{me.num_machines} machines (nodes 0-{me.num_machines - 1}); arrived: {came}; {problem}; "
        f"network: {network_env()}"
    )


# --- every process: one all-reduce over the transport training will use ---------------------------------


def check_ranks(timeout: int, environ=os.environ, plan: dict | None = None) -> None:
    """In each process the launcher started (WORLD_SIZE > 1), before the model loads: write who this rank
    is to the launcher's store, then all-reduce one number over every transport the run will use, each in a
    group of its own (the default group stays accelerate's to make): gloo always (the stop flag and the
    ranks' agreed decisions use a gloo group whatever the training backend), then NCCL on CUDA. A transport
    that cannot connect (a wrong GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, InfiniBand that is not there, a
    blocked port range) ends the process with exit code 2 and one line within `timeout` seconds, instead
    of a watchdog after 30 min.

    `plan` (the run plan's record): the gloo all-reduce also compares a digest of every rank's plan, so
    that machines which resolved it differently (other packages, another kind of GPU, another config)
    stop here with RendezvousError naming what differs, before they run different collectives.
    """
    import threading

    import torch
    import torch.distributed as dist

    rank, world = int(environ["RANK"]), int(environ["WORLD_SIZE"])
    host, port = environ["MASTER_ADDR"], int(environ["MASTER_PORT"])
    prefix = (
        f"autotrain/ranks/{environ.get('TORCHELASTIC_RUN_ID', '')}/{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
    )
    me = {"node": int(environ.get("GROUP_RANK", "0")), "host": socket.gethostname()}
    me["address"] = local_address(host, port)
    store = dist.TCPStore(host, port, None, False, datetime.timedelta(seconds=timeout))
    store.set(f"{prefix}{rank}", json.dumps({**me, "plan": plan}, default=str))
    transports = ("gloo", "nccl") if torch.cuda.is_available() else ("gloo",)
    stage = [transports[0]]

    def give_up(problem: str) -> None:
        came = _ranks_seen(host, port, prefix, world)
        print(
            f"error: rank {rank} of {world} (node {me['node']}, {me['host']}, {me['address']}): {problem}; "
            f"ranks at the store: {came}; network: {network_env(environ)}",
            flush=True,
            file=sys.stderr,
        )
        os._exit(2)  # a thread cannot interrupt a collective: the process ends, the launcher reports code 2

    late = f"did not finish within {timeout} s (distributed.rendezvous_timeout)"
    watchdog = threading.Timer(timeout, lambda: give_up(f"the {stage[0]} all-reduce over {world} processes {late}"))
    watchdog.daemon = True
    watchdog.start()  # one deadline for every transport together
    same = True
    try:
        for backend in transports:
            stage[0] = backend
            cuda, digest = backend == "nccl", None if backend == "nccl" else _digest(plan)
            group_store = dist.PrefixStore(f"{prefix}{backend}/", store)
            same = _all_reduce_once(group_store, rank, world, timeout, cuda, environ, digest) and same
    except RuntimeError as exc:
        watchdog.cancel()
        give_up(f"the {stage[0]} group could not form: {str(exc).strip().splitlines()[0]}")
    watchdog.cancel()
    if not same:
        raise _plans_differ(rank, world, me, plan, json.loads(store.get(f"{prefix}0")).get("plan"))


def _all_reduce_once(store, rank: int, world: int, timeout: int, cuda: bool, environ, digest: int | None = None):
    """One all-reduce over NCCL (`cuda`) or gloo; with `digest`, a second one that compares it across the
    ranks. Returns whether every rank gave the same digest (True without one)."""
    import torch
    import torch.distributed as dist

    if cuda:
        device = torch.device("cuda", int(environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        group = dist.ProcessGroupNCCL(store, rank, world)
    else:
        device = torch.device("cpu")
        group = dist.ProcessGroupGloo(store, rank, world, datetime.timedelta(seconds=timeout))
    value = torch.ones(1, device=device)
    group.allreduce([value]).wait()
    same = True
    if digest is not None:
        extremes = torch.tensor([digest, -digest], dtype=torch.int64, device=device)
        group.allreduce([extremes], _max_options()).wait()
        same = int(extremes[0]) == -int(extremes[1])  # the largest digest is also the smallest
    if cuda:
        torch.cuda.synchronize(device)
    if int(value.item()) != world:
        raise RuntimeError(f"the all-reduce summed to {int(value.item())}, not {world}")
    with contextlib.suppress(Exception):
        group.shutdown()  # frees the NCCL communicator; the run makes its own group
    return same


def _max_options():
    import torch.distributed as dist

    options = dist.AllreduceOptions()
    options.reduceOp = dist.ReduceOp.MAX
    return options


def _digest(plan: dict | None) -> int | None:
    """56 bits of the plan record's SHA-256 (an int64 all-reduce carries it and its negation exactly)."""
    import hashlib

    if plan is None:
        return None
    text = json.dumps(plan, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "big")


def _flat(record: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _plans_differ(rank: int, world: int, me: dict, mine: dict | None, main: dict | None) -> RendezvousError:
    """The error every rank raises when the ranks' plans differ: what this rank's differs in from rank 0's."""
    ours, theirs = _flat(json.loads(json.dumps(mine or {}, default=str))), _flat(main or {})
    fields = [key for key in sorted(set(ours) | set(theirs)) if ours.get(key) != theirs.get(key)]
    if fields:
        shown = "; ".join(f"{key}: {ours.get(key)!r} here, {theirs.get(key)!r} on rank 0" for key in fields[:4])
        what = f"this rank's plan differs from rank 0's in {shown}"
    else:
        what = "this rank's plan matches rank 0's, another rank's does not (its error names the fields)"
    return RendezvousError(
        f"rank {rank} of {world} (node {me['node']}, {me['host']}): the processes resolved different run plans: "
        f"{what}. Every machine needs the same config, the same packages and the same kind of GPU"
    )


def _ranks_seen(host: str, port: int, prefix: str, world: int) -> str:
    """`0-1 (node 0 from 10.0.0.1), 2 (node 1 from 10.0.0.2); missing 3` from a fresh store client."""
    import torch.distributed as dist

    try:
        store = dist.TCPStore(host, port, None, False, datetime.timedelta(seconds=5))
        found = {r: json.loads(store.get(f"{prefix}{r}")) for r in range(world) if store.check([f"{prefix}{r}"])}
    except RuntimeError as exc:
        return f"unreadable ({str(exc).strip().splitlines()[0]})"
    shown = [f"{r} (node {v['node']} from {v['address']})" for r, v in sorted(found.items())]
    missing = [str(r) for r in range(world) if r not in found]
    return ", ".join(shown) + (f"; missing {', '.join(missing)}" if missing else "")
