"""Hostile and broken inputs: the CLI keeps its promises on each one.

The promises (README "Exit codes", "Configs"):

- bad input never shows a Python traceback;
- every config mistake exits 2 and names the field (`training_args.epochs`) and, when the mistake is in
  a file, its `FILE:LINE:COL`;
- every case ends quickly and in little memory: no hang on a FIFO or /dev/zero, no blow-up on an alias
  bomb or deep nesting;
- no folder that autotrain did not make is ever deleted, and no secret is ever printed or written.

Each case runs the real command line in a fresh interpreter, in a throw-away folder, with a throw-away
HOME, under a watchdog that kills it at its timeout and reports its wall time and peak memory.
Static inputs live in tests/hostile/; big, binary or path-dependent ones are written here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
HOSTILE = Path(__file__).parent / "hostile"
ASSETS = Path(__file__).parent / "assets"
QUICKSTART = REPO_ROOT / "configs" / "llm" / "quickstart.yml"

SECRET = "hf_SECRETabc123"
# No wall-clock limit: each command runs under a watchdog that kills it after its timeout (a case's
# `timeout`, 60 s by default), which fails the test as a hang; how fast the CLI starts is measured by
# benchmarks/cli_startup.py, not asserted on a loaded machine. Runaway work is checked where it could
# happen, by what it would do (a data path of `/`: no folder is listed).
RSS_LIMIT_MIB = 300
# A safety net, not a check: a runaway child gets MemoryError instead of taking the machine down.
CAP_LIGHT = 4 << 30  # commands that never import torch
CAP_HEAVY = 16 << 30  # commands that may train

# --- running the CLI under a watchdog ------------------------------------------------------------------

# Runs the command as its own child, so that RUSAGE_CHILDREN measures that one process; kills its whole
# process group at the timeout; leaves stdout/stderr to the command. Writes code, wall and peak RSS.
_WATCHDOG = r"""
import json, os, resource, signal, subprocess, sys, time
result, cap, timeout, *cmd = sys.argv[1:]

def limit():
    if int(cap):
        resource.setrlimit(resource.RLIMIT_AS, (int(cap), int(cap)))

start = time.monotonic()
child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, preexec_fn=limit, start_new_session=True)
try:
    code = child.wait(timeout=float(timeout))
except subprocess.TimeoutExpired:
    os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    code = None
wall = time.monotonic() - start
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
with open(result, "w") as handle:
    json.dump({"code": code, "wall": wall, "rss_mib": rss}, handle)
"""


class Result(NamedTuple):
    code: int | None  # None: killed at the timeout
    out: str
    err: str
    wall: float  # seconds, the command alone
    rss_mib: float  # peak resident memory of the command

    @property
    def output(self) -> str:
        return self.out + self.err


def base_env(home: Path, **extra: str) -> dict[str, str]:
    """A small, explicit environment: nothing of the caller's (tokens, HOME) leaks in."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "PYTHONHASHSEED": "0",
        # this checkout's package, wherever the environment's editable install points
        "PYTHONPATH": str(REPO_ROOT),
        # The configs name hub ids that this offline machine cannot check; that check has its own tests.
        "AUTOTRAIN_SKIP_HUB_CHECK": "1",
    }
    env.update(extra)
    return env


def run_cli(*args, cwd: Path, env: dict[str, str] | None = None, timeout: float = 30, cap: int = CAP_LIGHT) -> Result:
    """`autotrain ARGS` in a fresh interpreter in `cwd`; killed (code None) after `timeout` seconds."""
    env = env if env is not None else base_env(cwd / ".home")
    cmd = [sys.executable, "-m", "autotrain.cli.main", *map(str, args)]
    with tempfile.TemporaryDirectory() as scratch:  # outside cwd: nothing of ours among the run's files
        report = Path(scratch) / "result.json"
        done = subprocess.run(
            [sys.executable, "-c", _WATCHDOG, str(report), str(cap), str(timeout), *cmd],
            cwd=cwd,
            env=env,
            capture_output=True,
            timeout=timeout + 60,
        )
        measured = json.loads(report.read_text())
    decode = lambda b: b.decode("utf-8", errors="replace")  # noqa: E731
    return Result(measured["code"], decode(done.stdout), decode(done.stderr), measured["wall"], measured["rss_mib"])


def assert_no_crash(r: Result, timeout: float) -> None:
    assert r.code is not None, f"still running after {timeout} s; killed\n{r.output[-3000:]}"
    assert "Traceback" not in r.output, r.output[-3000:]


def assert_position(r: Result, name: str, line: int) -> None:
    """The output points at FILE:LINE:COL for the file called `name`."""
    assert re.search(rf"{re.escape(name)}:{line}:\d+", r.output), f"no `{name}:{line}:COL` in:\n{r.output[-3000:]}"


def assert_duplicate(r: Result, name: str, lines: tuple[int, ...]) -> None:
    """A key given twice: the error sits at one of its lines (FILE:LINE:COL) and names every one of them
    (`:LINE:` or `line(s) ... LINE`)."""
    assert any(re.search(rf"{re.escape(name)}:{line}:\d+", r.output) for line in lines), r.output[-3000:]
    for line in lines:
        assert re.search(rf":{line}:|\blines?\b[^\n]*?(?<!\d){line}(?!\d)", r.output), (
            f"line {line} not named in:\n{r.output[-3000:]}"
        )


def assert_names_field(r: Result, dotted: str) -> None:
    assert re.search(rf"(?<![\w.]){re.escape(dotted)}(?![\w.])", r.output), (
        f"field `{dotted}` not named in:\n{r.output[-3000:]}"
    )


def files_containing(root: Path, needle: str) -> list[str]:
    """Regular files under `root` whose bytes contain `needle` (as UTF-8)."""
    target = needle.encode()
    found = []
    for path in root.rglob("*"):
        try:
            if stat.S_ISREG(path.lstat().st_mode) and target in path.read_bytes():
                found.append(str(path.relative_to(root)))
        except OSError:
            continue
    return found


def snapshot(root: Path) -> dict[str, str]:
    """SHA-256 of every regular file under `root` (HOME's caches left out)."""
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if rel.parts[:2] == ("home", ".cache") or not stat.S_ISREG(path.lstat().st_mode):
            continue
        out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def assert_survived(root: Path, before: dict[str, str]) -> None:
    after = snapshot(root) if root.is_dir() else {}
    lost = sorted(p for p in before if p not in after)
    changed = sorted(p for p in before if p in after and after[p] != before[p])
    assert not lost and not changed, f"deleted: {lost}; changed: {changed}"


def base_config(project_name: str, *, local: bool = False) -> str:
    """tests/hostile/valid.yml with another project_name (still on line 5) and, with `local`, the shipped
    tiny model and data (absolute paths), so that a run that is not refused really starts."""
    text = (HOSTILE / "valid.yml").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[4].startswith("project_name:")
    lines[4] = f"project_name: {json.dumps(project_name)}"  # a JSON string is a YAML double-quoted string
    text = "\n".join(lines) + "\n"
    if local:
        text = text.replace("HuggingFaceTB/SmolLM2-135M", str(ASSETS / "tiny-llama"))
        text = text.replace("HuggingFaceH4/no_robots", str(ASSETS / "data" / "text.jsonl"))
    return text


def quickstart(path: Path, project_name: str, /, **data: object) -> Path:
    """configs/llm/quickstart.yml (2-layer Llama, CPU) with absolute asset paths, for runs in a tmp folder."""
    cfg = yaml.safe_load(QUICKSTART.read_text(encoding="utf-8"))
    cfg["base_model"] = str(ASSETS / "tiny-llama")
    cfg["project_name"] = project_name
    cfg["data"]["path"] = str(ASSETS / "data" / "text.jsonl")
    cfg["data"].update(data)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def resolved(stdout: str) -> dict:
    """The resolved config that `--dry-run` prints before its `# plan`."""
    assert "\n# plan\n" in stdout, stdout
    return yaml.safe_load(stdout.split("\n# plan\n", 1)[0])


# --- generated inputs ---------------------------------------------------------------------------------

VALID = (HOSTILE / "valid.yml").read_text(encoding="utf-8")


# valid.yml with line 5 in Latin-1 (`project_name: runs/caf\xe9`) and with a NUL byte in line 5.
LATIN1 = VALID.replace("runs/hostile", "runs/caf\u00e9").encode("latin-1")
WITH_NUL = VALID.replace("runs/hostile", "runs/a\0b").encode()


def write_text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text, encoding="utf-8")


def write_bytes(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


def padded(size: int) -> Callable[[Path], None]:
    """A valid config after a comment of 80-character lines, `size` bytes in all."""

    def make(path: Path) -> None:
        body = VALID.encode()
        filler = size - len(body)
        row = b"# " + b"x" * 77 + b"\n"
        comment = row * (filler // len(row))
        comment += b"#" * (filler - len(comment) - 1) + b"\n" if filler - len(comment) else b""
        path.write_bytes(comment + body)
        assert path.stat().st_size == size

    return make


def nested(opening: str, closing: str, depth: int = 1000) -> Callable[[Path], None]:
    """valid.yml plus `training_args.optimizer_args` nested `depth` levels deep, all on line 15."""
    return write_text(VALID + f"  optimizer_args: {opening * depth}1{closing * depth}\n")


def make_fifo(path: Path) -> None:
    os.mkfifo(path)  # nobody ever writes to it: opening it for reading waits forever


def make_dir(path: Path) -> None:
    path.mkdir()
    (path / "valid.yml").write_text(VALID, encoding="utf-8")


def flow_bomb() -> str:
    """The billion laughs as a one-line YAML flow mapping, for `--set`."""
    parts = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    previous = "a"
    for name in "bcdefghi":
        parts.append(f"{name}: &{name} [{', '.join(['*' + previous] * 9)}]")
        previous = name
    return "{" + ", ".join(parts) + "}"


# --- the table ----------------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    args: tuple[str, ...]  # `{F}` stands for the input file, written into the run's folder
    code: int = 2
    fields: tuple[str, ...] = ()  # dotted field paths the output must name
    lines: tuple[int, ...] = ()  # each must appear as F:LINE:COL
    duplicate: tuple[int, ...] = ()  # lines of a key given twice: one as F:LINE:COL, every one named
    expect: tuple[str, ...] = ()  # other substrings of the output
    file: str | None = None  # a file of tests/hostile/
    make: Callable[[Path], None] | None = None  # or: writes the input at the given path
    name: str = "config.yml"  # the input's name in the run's folder (with `make`)
    env: dict[str, str] = field(default_factory=dict)
    secret: str | None = None  # must appear in no output and no file
    max_rss_mib: float | None = None
    timeout: float = 60  # killed after: a guard against hangs, not a speed target
    check: Callable[[Result], None] | None = None


def validate(file: str, code: int = 2, *fields: str, **kw) -> Case:
    """`autotrain validate tests/hostile/FILE`."""
    return Case(id=file.removesuffix(".yml"), args=("validate", "{F}"), code=code, fields=fields, file=file, **kw)


def set_(case_id: str, override: str, *fields: str, code: int = 2, **kw) -> Case:
    """`autotrain validate valid.yml --set OVERRIDE`."""
    return Case(id=case_id, args=("validate", "{F}", "--set", override), code=code, fields=fields,
                expect=("--set",) if code == 2 else (), file="valid.yml", **kw)  # fmt: skip


def dry_run_project(expected: str) -> Callable[[Result], None]:
    def check(r: Result) -> None:
        assert resolved(r.out)["project_name"] == expected, r.out

    return check


SMALL = RSS_LIMIT_MIB
TOO_LARGE = re.compile(r"too (large|big)|larger than|exceeds|at most|limit", re.I)

CASES = [
    validate("valid.yml", 0),  # the baseline: every other file breaks it in one place
    # 2. hangs and blow-ups
    validate("alias-bomb.yml", 2, max_rss_mib=SMALL, expect=("alias-bomb.yml",)),
    Case("alias-bomb-set", ("validate", "{F}", "--set", f"training_args.optimizer_args={flow_bomb()}"),
         fields=("training_args.optimizer_args",), expect=("--set",), file="valid.yml", max_rss_mib=SMALL),
    Case("dev-zero", ("validate", "/dev/zero"), expect=("/dev/zero",), max_rss_mib=SMALL),
    Case("fifo", ("validate", "{F}"), make=make_fifo, name="fifo.yml", expect=("fifo.yml",)),
    Case("directory", ("validate", "{F}"), make=make_dir, name="confdir", expect=("confdir",)),
    Case("too-large-2mib", ("validate", "{F}"), make=padded(2 << 20), expect=("config.yml",),
         check=lambda r: TOO_LARGE.search(r.err) or pytest.fail(r.err),
         max_rss_mib=SMALL),
    Case("comment-1mib-ok", ("validate", "{F}"), code=0, make=padded((1 << 20) - 1), expect=("config.yml: ok",),
         max_rss_mib=SMALL),
    Case("nested-lists-1000", ("validate", "{F}"), make=nested("[", "]"), lines=(15,), max_rss_mib=SMALL),
    Case("nested-mappings-1000", ("validate", "{F}"), make=nested("{a: ", "}"), lines=(15,), max_rss_mib=SMALL),
    Case("not-utf8", ("validate", "{F}"), make=write_bytes(LATIN1), lines=(5,),
         check=lambda r: "utf-8" in r.err.lower() or pytest.fail(r.err)),
    Case("nul-byte", ("validate", "{F}"), make=write_bytes(WITH_NUL), lines=(5,)),
    validate("empty.yml", 2, "task"),
    validate("only-comments.yml", 2, "task"),
    # 3. wrong types
    validate("task-list.yml", 2, "task", lines=(2,)),
    validate("task-mapping.yml", 2, "task", lines=(2,)),
    validate("task-int.yml", 2, "task", lines=(2,)),
    validate("advanced-task-list.yml", 2, "task", lines=(2,)),
    # 4. values that must be refused
    validate("epochs-inf.yml", 2, "training_args.epochs", lines=(11,)),
    validate("epochs-nan.yml", 2, "training_args.epochs", lines=(11,)),
    validate("weight-decay-inf.yml", 2, "training_args.weight_decay", lines=(15,)),
    validate("lr-nan.yml", 2, "training_args.lr", lines=(13,)),
    validate("max-grad-norm-inf.yml", 2, "training_args.max_grad_norm", lines=(15,)),
    validate("warmup-ratio-nan.yml", 2, "training_args.warmup_ratio", lines=(15,)),
    validate("seed-2pow70.yml", 2, "training_args.seed", lines=(15,)),
    validate("seed-2pow32.yml", 2, "training_args.seed", lines=(15,)),
    validate("batch-size-huge.yml", 2, "training_args.batch_size", lines=(12,)),
    validate("max-length-huge.yml", 2, "training_args.max_length", lines=(14,)),
    validate("dataloader-workers-huge.yml", 2, "training_args.dataloader_num_workers", lines=(15,)),
    validate("num-processes-huge.yml", 2, "distributed.num_processes", lines=(16,)),
    validate("lr-yes.yml", 2, "training_args.lr", lines=(13,)),
    validate("lr-true.yml", 2, "training_args.lr", lines=(13,)),
    validate("batch-size-true.yml", 2, "training_args.batch_size", lines=(12,)),
    validate("trust-remote-code-y.yml", 2, "trust_remote_code", lines=(15,)),
    validate("trust-remote-code-yes.yml", 2, "trust_remote_code", lines=(15,)),
    validate("trust-remote-code-1.yml", 2, "trust_remote_code", lines=(15,)),
    validate("project-name-nul.yml", 2, "project_name", lines=(5,)),
    validate("project-name-etc.yml", 2, "project_name", lines=(5,)),
    validate("project-name-root.yml", 2, "project_name", lines=(5,)),
    validate("duplicate-top-level.yml", 2, "project_name", duplicate=(5, 15)),
    validate("duplicate-training-args.yml", 2, "training_args", duplicate=(10, 15)),
    validate("duplicate-data-key.yml", 2, "data.path", duplicate=(7, 10)),
    # the same mistakes given on the command line
    set_("set-epochs-inf", "training_args.epochs=.inf", "training_args.epochs"),
    set_("set-lr-nan", "training_args.lr=.nan", "training_args.lr"),
    set_("set-seed-2pow32", "training_args.seed=4294967296", "training_args.seed"),
    # (`yes` unquoted is YAML 1.1's true; `y` is a string)
    set_("set-trust-remote-code-y", "trust_remote_code=y", "trust_remote_code"),
    set_("set-trust-remote-code-1", "trust_remote_code=1", "trust_remote_code"),
    set_("set-project-name-dot", "project_name=.", "project_name"),
    set_("set-project-name-root", "project_name=/", "project_name"),
    # 5. secrets
    Case("set-token-no-equals", ("validate", "{F}", "--set", f"hub.token:{SECRET}"), file="valid.yml",
         expect=("--set",), secret=SECRET),
    Case("dry-run-set-token", ("llm", "--config", "{F}", "--dry-run", "--set", f"hub.token={SECRET}"), code=0,
         file="valid.yml", secret=SECRET),
    Case("validate-token-in-data-path", ("validate", "{F}"), code=2,
         expect=("data.path: `***/data.jsonl` does not exist on this machine",), lines=(7,),
         file="token-in-data-path.yml", env={"HF_TOKEN": SECRET}, secret=SECRET),
    Case("dry-run-token-in-data-path", ("llm", "--config", "{F}", "--dry-run"), code=2,
         expect=("data.path `***/data.jsonl` does not exist on this machine",),
         file="token-in-data-path.yml", env={"HF_TOKEN": SECRET}, secret=SECRET),
    Case("run-token-in-data-path", ("llm", "--config", "{F}"), code=2,
         expect=("data.path `***/data.jsonl` does not exist on this machine",),
         file="token-in-data-path.yml", env={"HF_TOKEN": SECRET}, secret=SECRET),
    Case("migrate-literal-token", ("migrate", "{F}"), code=0, file="advanced-literal-token.yml",
         expect=("${HF_TOKEN}",), secret=SECRET),
    # 7. interpolation
    Case("interp-nested-default", ("llm", "--config", "{F}", "--dry-run"), code=0, file="interp-nested-default.yml",
         check=dry_run_project("runs/x")),
    Case("interp-nested-default-inner-set", ("llm", "--config", "{F}", "--dry-run"), code=0,
         file="interp-nested-default.yml", env={"B": "y"}, check=dry_run_project("runs/y")),
    Case("interp-escaped-dollar", ("llm", "--config", "{F}", "--dry-run"), code=0, file="interp-escaped.yml",
         env={"X": "boom"}, check=dry_run_project("runs/${X}")),
]  # fmt: skip


# A dry run loads the training stack in a fresh process (~4 s each on two cores): in the slow set, which CI runs.
PARAMS = [pytest.param(c, id=c.id, marks=[pytest.mark.slow] if "--dry-run" in c.args else []) for c in CASES]


@pytest.mark.parametrize("case", PARAMS)
def test_hostile_input(case: Case, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    name = case.file or case.name
    if case.file:
        shutil.copyfile(HOSTILE / case.file, work / name)
    elif case.make:
        case.make(work / name)
    args = [a.replace("{F}", name) for a in case.args]

    r = run_cli(*args, cwd=work, env=base_env(tmp_path / "home", **case.env), timeout=case.timeout)

    assert_no_crash(r, case.timeout)
    assert r.code == case.code, f"exit {r.code}, expected {case.code}\n{r.output[-3000:]}"
    if case.max_rss_mib is not None:
        assert r.rss_mib < case.max_rss_mib, f"peak RSS {r.rss_mib:.0f} MiB"
    for dotted in case.fields:
        assert_names_field(r, dotted)
    for line in case.lines:
        assert_position(r, name, line)
    if case.duplicate:
        assert_duplicate(r, name, case.duplicate)
    for text in case.expect:
        assert text in r.output, f"{text!r} not in:\n{r.output[-3000:]}"
    if case.secret:
        assert case.secret not in r.output
        written = [p for p in files_containing(tmp_path, case.secret) if p != f"work/{name}"]  # not the input
        assert written == [], "secret written to a file"
    if case.check:
        case.check(r)


# --- 1. data loss: --overwrite never deletes what autotrain did not make ---------------------------------


@pytest.fixture
def sacrificial(tmp_path: Path) -> Path:
    """tmp/{keep.txt, run.json, autotrain.yaml, home/, a/{...}, a/work/{...}, a/work/conf/{...}}: every
    folder holds decoys, and the run.json / autotrain.yaml decoys make each look like a run folder."""
    for folder in ("", "home", "a", "a/work", "a/work/conf"):
        d = tmp_path / folder
        d.mkdir(parents=True, exist_ok=True)
        (d / "keep.txt").write_text(f"precious {folder or 'root'}\n", encoding="utf-8")
        (d / "run.json").write_text(json.dumps({"decoy": folder}) + "\n", encoding="utf-8")
        (d / "autotrain.yaml").write_text(f"# not a config of ours: {folder}\n", encoding="utf-8")
    return tmp_path


def _target(project: str, tmp: Path) -> str:
    return {"ABS_CWD": str(tmp / "a" / "work"), "PARENT": str(tmp)}.get(project, project)


@pytest.mark.parametrize(
    "project",
    [".", "", "./", "..", "~", "/", "ABS_CWD", "PARENT", "conf"],
    ids=["dot", "empty", "dot-slash", "dot-dot", "tilde", "root", "abs-cwd", "parent-of-cwd", "config-folder"],
)
def test_overwrite_never_deletes_a_folder_it_did_not_make(sacrificial: Path, project: str):
    work = sacrificial / "a" / "work"
    target = _target(project, sacrificial)
    config = work / ("conf" if project == "conf" else "") / "config.yml"
    config.write_text(base_config(target), encoding="utf-8")
    rel = str(config.relative_to(work))
    env = base_env(sacrificial / "home")
    before = snapshot(sacrificial)

    if project == "/":
        # Never let a build that accepts `/` near --overwrite: same loader, so validate must refuse first.
        assert not any((Path("/") / m).exists() for m in ("run.json", "autotrain.yaml", "trainer_state.json")), (
            "/ holds run files; refusing to run this case"
        )
        checked = run_cli("validate", rel, cwd=work, env=env)
        assert checked.code == 2, f"validate accepts project_name: /; not trying --overwrite on it\n{checked.output}"

    r = run_cli("llm", "--config", rel, "--overwrite", cwd=work, env=env, timeout=60, cap=CAP_HEAVY)

    assert_survived(sacrificial, before)
    assert_no_crash(r, 60)
    assert r.code == 2, f"exit {r.code}\n{r.output[-3000:]}"
    assert_names_field(r, "project_name")
    assert_position(r, "config.yml", 5)


@pytest.mark.parametrize(
    "files",
    [
        {"run.json": '{"mine": true}\n', "keep.txt": "precious\n"},
        {"trainer_state.json": "{}\n", "checkpoint-5/model.safetensors": "weights\n", "keep.txt": "precious\n"},
    ],
    ids=["run-json-lookalike", "hf-trainer-output"],
)
def test_overwrite_refuses_a_run_folder_autotrain_did_not_make(tmp_path: Path, files: dict[str, str]):
    work = tmp_path / "work"
    for rel, text in files.items():
        (work / "lookalike" / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / "lookalike" / rel).write_text(text, encoding="utf-8")
    (work / "config.yml").write_text(base_config("lookalike"), encoding="utf-8")
    before = snapshot(work)

    r = run_cli("llm", "--config", "config.yml", "--overwrite", cwd=work, env=base_env(tmp_path / "home"),
                timeout=60, cap=CAP_HEAVY)  # fmt: skip

    assert_survived(work, before)
    assert_no_crash(r, 60)
    assert r.code == 2, f"exit {r.code}\n{r.output[-3000:]}"
    assert "lookalike" in r.output


# --- 5. secrets in files ------------------------------------------------------------------------------


def test_migrate_to_a_file_writes_the_variable_not_the_token(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copyfile(HOSTILE / "advanced-literal-token.yml", work / "old.yml")

    r = run_cli("migrate", "old.yml", "-o", "new.yml", cwd=work, env=base_env(tmp_path / "home"))

    assert_no_crash(r, 30)
    assert r.code == 0, r.output
    assert SECRET not in r.output
    assert "${HF_TOKEN}" in (work / "new.yml").read_text(encoding="utf-8")
    assert files_containing(tmp_path, SECRET) == ["work/old.yml"]


@pytest.mark.slow
def test_secret_in_data_path_of_a_started_run(tmp_path: Path):
    """The run starts (tiny model, real command) and fails on the data path: the path, which holds the
    token, must not reach the terminal, run.json or any log."""
    work = tmp_path / "work"
    work.mkdir()
    text = base_config("run", local=True).replace(str(ASSETS / "data" / "text.jsonl"), "${HF_TOKEN}/data.jsonl")
    (work / "config.yml").write_text(text, encoding="utf-8")

    r = run_cli("llm", "--config", "config.yml", cwd=work, env=base_env(tmp_path / "home", HF_TOKEN=SECRET),
                timeout=60, cap=CAP_HEAVY)  # fmt: skip

    assert_no_crash(r, 60)
    assert r.code == 2, f"exit {r.code}\n{r.output[-3000:]}"
    assert SECRET not in r.output
    assert files_containing(tmp_path, SECRET) == []


# --- 6. data paths that are not data ------------------------------------------------------------------


def test_data_path_root_is_refused_before_any_folder_is_listed(cli, tmp_path: Path, monkeypatch):
    """What a data path of `/` could cost, checked by what it would do: no folder is listed (in this process:
    the command line's own code, as the subprocess below runs it)."""
    listed: list[str] = []
    for name in ("scandir", "listdir"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda path=".", real=real: listed.append(os.fspath(path)) or real(path))
    config = tmp_path / "config.yml"
    config.write_text(base_config(str(tmp_path / "run"), local=True).replace(str(ASSETS / "data" / "text.jsonl"), "/"))
    result = cli("llm", "--config", config)
    assert result.exit_code == 2 and "data.path" in result.stderr, result.output
    assert "/" not in {os.path.abspath(path) for path in listed}, listed


def test_data_path_root_is_refused_without_walking_the_file_system(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.yml").write_text(
        base_config("run", local=True).replace(str(ASSETS / "data" / "text.jsonl"), "/"), encoding="utf-8"
    )

    r = run_cli("llm", "--config", "config.yml", cwd=work, env=base_env(tmp_path / "home"), timeout=20, cap=CAP_HEAVY)

    assert_no_crash(r, 20)
    assert r.code == 2, f"exit {r.code}\n{r.output[-3000:]}"
    assert_names_field(r, "data.path")


@pytest.mark.slow
def test_data_path_system_file_is_refused_and_never_fingerprinted(tmp_path: Path):
    system = Path("/etc/passwd")
    digest = hashlib.sha256(system.read_bytes()).hexdigest()
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.yml").write_text(
        base_config("run", local=True).replace(str(ASSETS / "data" / "text.jsonl"), str(system)), encoding="utf-8"
    )

    r = run_cli("llm", "--config", "config.yml", cwd=work, env=base_env(tmp_path / "home"), timeout=60, cap=CAP_HEAVY)

    assert_no_crash(r, 60)
    assert r.code == 2, f"exit {r.code}\n{r.output[-3000:]}"
    assert "data.path" in r.output or str(system) in r.output, r.output[-3000:]
    assert files_containing(tmp_path, digest) == []
    for manifest in tmp_path.rglob("run.json"):
        assert digest not in manifest.read_text(encoding="utf-8")


# --- 6. schema -o ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("force", [False, True], ids=["refused", "force"])
def test_schema_output_never_replaces_a_file_silently(tmp_path: Path, force: bool):
    work = tmp_path / "work"
    work.mkdir()
    existing = work / "mine.json"
    existing.write_text("my own notes\n", encoding="utf-8")

    r = run_cli("schema", "llm", "-o", "mine.json", *(["--force"] if force else []), cwd=work,
                env=base_env(tmp_path / "home"))  # fmt: skip

    assert_no_crash(r, 30)
    if force:
        assert r.code == 0, r.output
        assert json.loads(existing.read_text(encoding="utf-8"))["title"] == "autotrain llm config"
    else:
        assert r.code == 2, r.output
        assert "mine.json" in r.err and "--force" in r.err
        assert existing.read_text(encoding="utf-8") == "my own notes\n"


# --- slow: real (tiny) training runs --------------------------------------------------------------------

MAX_STEPS = "training_args.max_steps=2"


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> tuple[Path, Result]:
    """One finished 2-step quickstart run, with a hub token typed on the command line."""
    root = tmp_path_factory.mktemp("finished")
    work = root / "work"
    work.mkdir()
    quickstart(work / "config.yml", "run")
    r = run_cli("llm", "--config", "config.yml", "--set", MAX_STEPS, "--set", f"hub.token={SECRET}", cwd=work,
                env=base_env(root / "home"), timeout=300, cap=CAP_HEAVY)  # fmt: skip
    return root, r


@pytest.mark.slow
def test_secret_typed_on_the_command_line_reaches_no_output_and_no_file(finished_run):
    root, r = finished_run
    assert_no_crash(r, 300)
    assert r.code == 0, r.output[-3000:]
    assert SECRET not in r.output
    assert files_containing(root, SECRET) == []


@pytest.mark.slow
def test_resume_of_a_finished_run_changes_nothing(finished_run):
    root, first = finished_run
    assert first.code == 0, first.output[-3000:]
    work, project = root / "work", root / "work" / "run"
    assert (project / "train_results.json").is_file()
    # Result files: all but the manifest, the logs and autotrain's own dot-files (lock, marker).
    results = {p: h for p, h in snapshot(project).items() if p != "run.json" and not p.startswith(("logs/", "."))}

    r = run_cli("llm", "--config", "config.yml", "--set", MAX_STEPS, "--set", f"hub.token={SECRET}", "--resume",
                cwd=work, env=base_env(root / "home"), timeout=300, cap=CAP_HEAVY)  # fmt: skip

    assert_no_crash(r, 300)
    assert r.code == 0, r.output[-3000:]
    assert "finished" in r.output.lower(), r.output[-3000:]
    after = snapshot(project)
    assert {p: after.get(p) for p in results} == results, "result files changed"


@pytest.mark.slow
@pytest.mark.parametrize(
    "broken",
    [{"path": "MISSING"}, {"column_mapping": {"text": "no_such_column"}}],
    ids=["missing-data-file", "missing-column"],
)
@pytest.mark.slow
def test_a_refused_run_does_not_block_the_corrected_rerun(tmp_path: Path, broken: dict):
    work = tmp_path / "work"
    work.mkdir()
    env = base_env(tmp_path / "home")
    if broken.get("path") == "MISSING":
        broken = {"path": str(tmp_path / "missing.jsonl")}
    quickstart(work / "config.yml", "run", **broken)

    refused = run_cli("llm", "--config", "config.yml", "--set", MAX_STEPS, cwd=work, env=env, timeout=120,
                      cap=CAP_HEAVY)  # fmt: skip
    assert_no_crash(refused, 120)
    assert refused.code == 2, refused.output[-3000:]
    assert ("missing.jsonl" if "path" in broken else "no_such_column") in refused.output, refused.output[-3000:]

    quickstart(work / "config.yml", "run")  # the user fixes the file and runs the same command again
    rerun = run_cli("llm", "--config", "config.yml", "--set", MAX_STEPS, cwd=work, env=env, timeout=300,
                    cap=CAP_HEAVY)  # fmt: skip
    assert_no_crash(rerun, 300)
    assert "already holds a run" not in rerun.output
    assert rerun.code == 0, rerun.output[-3000:]


@pytest.mark.slow
def test_two_runs_at_once_on_one_folder(tmp_path: Path):
    """Both start together; one trains, the other exits 2 naming the pid that holds the folder."""
    work = tmp_path / "work"
    work.mkdir()
    quickstart(work / "config.yml", "run")
    env = base_env(tmp_path / "home")
    logs = tmp_path / "logs"
    logs.mkdir()
    cmd = [sys.executable, "-m", "autotrain.cli.main", "llm", "--config", "config.yml",
           "--set", "training_args.max_steps=100000"]  # fmt: skip
    procs = []
    for i in range(2):
        log = open(logs / f"{i}.log", "wb")  # noqa: SIM115 - closed below
        procs.append((subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True), log))  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and all(p.poll() is None for p, _ in procs):
            time.sleep(0.2)
        ended = [(i, p) for i, (p, _) in enumerate(procs) if p.poll() is not None]
        assert ended, "neither run was refused within 90 s: both are training in the same folder"
        i, loser = ended[0]
        winner = procs[1 - i][0]
        output = (logs / f"{i}.log").read_text(encoding="utf-8", errors="replace")
        assert "Traceback" not in output, output[-3000:]
        assert loser.returncode == 2, f"exit {loser.returncode}\n{output[-3000:]}"
        assert str(winner.pid) in output, f"holder pid {winner.pid} not named:\n{output[-3000:]}"
    finally:
        for p, _ in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p, log in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            log.close()
