"""Configs for the page: live validation with the CLI's own checks, templates, schemas, YAML edits."""

from __future__ import annotations

from pathlib import Path

import yaml

from autotrain.config.load import LoadedConfig, load_data
from autotrain.config.yaml_source import parse_yaml
from autotrain.errors import ConfigError, ConfigIssue

MAX_CONFIG = 1024 * 1024  # bytes of YAML: the largest config the app reads, checks or saves


def too_large(text: str | bytes) -> str | None:
    """Why `text` is refused for its size, or None (a config is at most 1 MiB)."""
    size = len(text.encode("utf-8") if isinstance(text, str) else text)
    return f"the config is {size:,} bytes; a config is at most 1 MiB" if size > MAX_CONFIG else None


def problem(issue: ConfigIssue) -> dict:
    return {"line": issue.line, "column": issue.col, "path": issue.dotted, "message": issue.message}


def check(text: str, source: str = "config.yml") -> tuple[dict, LoadedConfig | None]:
    """{"ok", "problems", "data"} for YAML text, and the loaded config when it is valid.

    `data` is the parsed YAML before `${VAR}` interpolation, so no environment value leaves the server.
    """
    try:
        data, locator = parse_yaml(text, source)
    except ConfigError as exc:
        return {"ok": False, "problems": [problem(i) for i in exc.issues], "data": None}, None
    try:
        loaded = load_data(data, locator)
    except ConfigError as exc:
        return {"ok": False, "problems": [problem(i) for i in exc.issues], "data": data}, None
    return {"ok": True, "problems": [], "data": data}, loaded


def secrets_of(loaded: LoadedConfig | None) -> set[str]:
    """Values that must never leave the server: `${SECRET}` values and hub.token."""
    if loaded is None:
        return set()
    token = loaded.config.hub.token
    return set(loaded.secrets) | ({token} if token else set())


def list_templates() -> list[dict]:
    """Every shipped config (`autotrain init`'s templates and the quick starts), with its text."""
    from autotrain.config.templates import TASKS, TEMPLATES, templates_dir

    defaults = {name: key for key, name in TEMPLATES.items()}
    found = []
    for task in TASKS:
        for path in sorted((templates_dir() / task).glob("*.yml")):
            name = f"{task}/{path.name}"
            text = path.read_text(encoding="utf-8")
            data = yaml.safe_load(text) or {}
            trainer = data.get("trainer") if task == "llm" else None
            found.append({"name": name, "task": task, "trainer": trainer, "default": name in defaults, "text": text})
    return found


def task_schemas(task: str) -> dict:
    """The task's JSON Schema, per optimizer the schema of its `optimizer_args`, and for `llm` the trainer
    table (what the page lists and explains: every choice comes from here, none is written into the page)."""
    from autotrain.config.templates import task_schema
    from autotrain.optimizers.table import OPTIMIZERS

    optimizers = {name: spec.args.model_json_schema() for name, spec in OPTIMIZERS.items()}
    schemas = {"schema": task_schema(task), "optimizers": optimizers}
    if task == "llm":
        schemas["trainers"] = trainer_table()
    return schemas


def trainer_table() -> dict[str, dict]:
    """Each trainer of `autotrain.config.trainers` as plain data: help line, columns, fields, template."""
    from autotrain.config.trainers import TRAINERS

    return {
        name: {
            "help": spec.help,
            "columns": [list(group) for group in spec.columns],
            "optional_columns": list(spec.optional_columns),
            "fields": list(spec.fields),
            "data_format": spec.data_format,
            "generates": spec.generates,
            "template": spec.template,
        }
        for name, spec in TRAINERS.items()
    }


def missing_paths(loaded: LoadedConfig, workdir: Path) -> list[str]:
    """Local paths the config names that are not there (read from `workdir`, as the run will read them).

    A name that may be a hub id is left to the run (it asks the hub); one that can only be a local
    path (a data file's suffix, `./`, `/`, `~`, more than one `/`) must exist before a run starts.
    """
    from autotrain.training.hub import hub_id

    cfg = loaded.config
    found = []
    for name, value in (("data.path", cfg.data.path), ("base_model", cfg.base_model)):
        if not isinstance(value, str) or not value or (workdir / Path(value).expanduser()).exists():
            continue
        if hub_id(value) is None or value.count("/") > 1:
            found.append(f"{name} `{value}` does not exist (relative paths are read from `{workdir}`)")
    return found
