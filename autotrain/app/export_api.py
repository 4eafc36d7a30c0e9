"""The app's Export action: `POST /api/runs/{name}/export` starts `autotrain export` on a finished run,
`GET /api/runs/{name}/export` says whether one is running and lists the exports the run holds, each with its
parity figures (from its `export_report.json`).

An export runs in the background, as a child `python -m autotrain.cli.main export ...`, the way the app runs
training: loading a model, writing it and the parity check take minutes for a 7B model (far past any HTTP
timeout), the server process never imports torch, and the app's export is exactly the command's (same
checks, same exit codes; the output goes to `<run>/logs/export.log`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fastapi import FastAPI

from autotrain.app import runinfo
from autotrain.app.paths import run_folder
from autotrain.app.runs import Runs
from autotrain.config.export_formats import DEFAULT_QUANT, FORMATS, GGUF_QUANTS, MERGED_DTYPES, quant_problem

LOG = "logs/export.log"
REPORT = "export_report.json"


def register(app: FastAPI, runs: Runs) -> None:
    children = runs.exports  # the app, stopped, stops these too (app/lifecycle.py)
    error = app.state.error

    @app.get("/api/export/options")
    def options() -> dict:
        return {"formats": FORMATS, "quants": list(GGUF_QUANTS), "merged_dtypes": list(MERGED_DTYPES)}

    @app.get("/api/runs/{name}/export")
    def exports(name: str):
        folder = run_folder(runs.root, name)
        if not folder.is_dir():
            return error(404, f"no run `{name}` in the runs dir")
        child = children.get(name)
        return {
            "name": name,
            "running": child is not None and child.poll() is None,
            "exit_code": None if child is None else child.poll(),
            "exports": list_exports(folder),
            "log": _tail(folder / LOG) if child else "",
            "formats": formats_for(folder),
        }

    @app.post("/api/runs/{name}/export")
    def start(name: str, body: dict):
        folder = run_folder(runs.root, name)
        if not folder.is_dir():
            return error(404, f"no run `{name}` in the runs dir")
        fmt, quant = body.get("format", "gguf"), body.get("quant") or None
        problem = quant_problem(fmt, quant) if isinstance(fmt, str) and isinstance(quant, (str, type(None))) else None
        if problem or not isinstance(fmt, str):
            return error(400, problem or 'give {"format": FORMAT, "quant": QUANT}')
        if fmt not in formats_for(folder):
            return error(400, f"run `{name}` holds a {runinfo.task(folder)} model: it exports as `merged` only")
        status = runs.status(name)["status"]
        if status != "completed":
            return error(409, f"run `{name}` is not finished (status: {status}); only a completed run exports")
        if children.get(name) is not None and children[name].poll() is None:
            return error(409, f"an export of `{name}` is already running")
        if runs.closing:
            return error(409, "the app is stopping: no export starts now")
        children[name] = _spawn(folder, runs.workdir, fmt, quant or DEFAULT_QUANT[fmt])
        return {"name": name, "format": fmt, "quant": quant or DEFAULT_QUANT[fmt], "pid": children[name].pid}


def formats_for(folder: Path) -> list[str]:
    """The formats a run's model exports to: GGUF and Ollama are for LLMs."""
    return list(FORMATS) if runinfo.task(folder) in (None, "llm") else ["merged"]


def _spawn(folder: Path, workdir: Path, fmt: str, quant: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "autotrain.cli.main", "export", str(folder), "-f", fmt, "-q", quant, "--force"]
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    with open(folder / LOG, "w", encoding="utf-8") as log:
        log.write(f"==> {time.strftime('%Y-%m-%d %H:%M:%S')} autotrain export {folder.name} -f {fmt} -q {quant}\n")
        log.flush()
        return subprocess.Popen(
            command,
            cwd=workdir,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def list_exports(folder: Path) -> list[dict]:
    """The exports in a run folder (passed or `.failed`), newest first, with the figures the page shows."""
    found = []
    for report_file in folder.glob(f"export-*/{REPORT}"):
        report = runinfo.read_json(report_file)
        if not report:
            continue
        parity = report.get("parity", {})
        found.append(
            {
                "folder": report_file.parent.name,
                "format": report.get("format"),
                "quant": report.get("quant"),
                "passed": report.get("passed"),
                "failures": report.get("failures", []),
                "files": report.get("files", []),
                "export_seconds": report.get("export_seconds"),
                "prompts": parity.get("prompts"),
                "prompts_source": parity.get("prompts_source"),
                "readers": parity.get("readers", {}),
                "modified": report_file.stat().st_mtime,
            }
        )
    return sorted(found, key=lambda e: -e["modified"])
