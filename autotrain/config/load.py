"""YAML file -> validated task config: the one entry point the rest of the package uses."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotrain.config import advanced, messages
from autotrain.config.base import TaskConfig
from autotrain.config.interpolate import REDACTED, interpolate, redact, secret_values
from autotrain.config.messages import RULE_ERROR
from autotrain.config.overrides import apply_overrides
from autotrain.config.paths import check_paths, missing_local_paths, text_problems
from autotrain.config.rules import check_rules
from autotrain.config.suggest import did_you_mean
from autotrain.config.tasks import TaskModels
from autotrain.config.yaml_source import Locator, read_yaml
from autotrain.errors import ConfigError, ConfigIssue

# Unknown keys past this many get no suggestion: so many are not typos, and each search costs.
SUGGEST_LIMIT = 200
# Every task of the table (autotrain/config/tasks.py); a task's schema is imported when a config names it.
TASK_MODELS: TaskModels = TaskModels()


@dataclass
class LoadedConfig:
    """A validated config plus what the run needs to know about where it came from."""

    config: TaskConfig
    source: str
    secrets: set[str] = field(default_factory=set)
    notices: list[str] = field(default_factory=list)
    raw: dict = field(default_factory=dict)  # after translation, overrides and interpolation
    advanced: bool = False  # translated from AutoTrain Advanced (then notices[0] says so)

    def redacted(self) -> dict:
        """The resolved config as plain data, secrets replaced by `***`: safe to print or save."""
        return redact(self.config.model_dump(mode="json"), self.secrets)


def load_config(
    path: str | Path,
    overrides: list[str] | tuple[str, ...] = (),
    expected_task: str | None = None,
    environ: dict[str, str] | None = None,
    local_paths: bool = False,
) -> LoadedConfig:
    """Read, translate, override, interpolate and validate a config; raise ConfigError with every issue.

    `local_paths`: also refuse a base_model / data.path that can only be a path here and is not (`validate`
    asks; a run says it in its preflight, and a saved run's config is read back from anywhere)."""
    data, locator = read_yaml(path)
    return load_data(data, locator, overrides, expected_task, environ, local_paths)


def load_data(
    data: Any,
    locator: Locator,
    overrides: list[str] | tuple[str, ...] = (),
    expected_task: str | None = None,
    environ: dict[str, str] | None = None,
    local_paths: bool = False,
) -> LoadedConfig:
    """Raw YAML data -> validated config: translate, override, interpolate, pick the task, validate."""
    issues: list[ConfigIssue] = list(locator.problems)
    notices: list[str] = []
    translated = False
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([locator.issue((), "a config must be a YAML mapping of `key: value` lines")])
    if advanced.is_advanced(data):
        translated = True
        data, renamed, problems, dropped = advanced.translate(data)
        locator.renamed.update(renamed)
        issues += [locator.issue(p, m) for p, m in problems]
        notices.append(
            f"{locator.source}: AutoTrain Advanced config translated to the native format "
            f"(see `autotrain migrate {locator.source}`)"
        )
        notices += [locator.issue(p, m).format() for p, m in dropped]
    data, set_paths, override_issues = apply_overrides(data, list(overrides))
    issues += override_issues
    locator.overridden.update(set_paths)
    optional = _needed_to_push(data)
    data, unset, secrets = interpolate(data, environ, optional=optional)
    unset_issues = [locator.issue(p, m) for p, m in unset]
    issues += unset_issues
    if ("hub", "token") in optional and data["hub"].get("token") is None:
        unset_token = "its variable is not set, so no token is used (nothing is pushed; downloads use a saved login)"
        notices.append(locator.issue(("hub", "token"), unset_token).format())
    secrets |= secret_values(data)
    issues += [locator.issue(p, m) for p, m in text_problems(data)]

    task = _task(data, locator, issues, expected_task)
    if task is None:
        raise ConfigError(_sorted(issues, secrets))
    config = _validate(TASK_MODELS[task], data, task, locator, issues)
    if config is not None:
        issues += [locator.issue(p, m) for p, m in check_paths(config, locator.source)]
    # An unset variable left "" behind: what the schema or the rules say about that "" follows from it.
    unset_paths = {issue.path for issue in unset_issues}
    issues = [i for i in issues if i.path not in unset_paths or i in unset_issues]
    if config is not None and local_paths:
        issues += [locator.issue(p, m) for p, m in missing_local_paths(config)]
    if issues:
        raise ConfigError(_sorted(issues, secrets))
    return LoadedConfig(
        config=config, source=locator.source, secrets=secrets, notices=notices, raw=data, advanced=translated
    )


def load_saved(path: str | Path) -> TaskConfig:
    """The config a run saved in its folder (`autotrain.yaml`), for whoever uses the finished run (chat,
    predict, evaluate, export). It was translated, overridden, interpolated and its paths checked when the
    run started, and saved with its secrets redacted: here it is read as it is and validated by its task's
    schema and rules, nothing else (the paths it names need not exist where the model is used). Raises
    ConfigError with every issue."""
    data, locator = read_yaml(path)
    issues: list[ConfigIssue] = list(locator.problems)
    if not isinstance(data, dict):
        raise ConfigError([locator.issue((), "a saved config is a YAML mapping of `key: value` lines")])
    task = _task(data, locator, issues, None)
    config = _validate(TASK_MODELS[task], data, task, locator, issues) if task is not None else None
    if issues or config is None:
        raise ConfigError(_sorted(issues))
    return config


def _needed_to_push(data: dict) -> set[tuple]:
    """`hub.token: ${HF_TOKEN}` and `hub.repo_id: ${HF_USERNAME}/name` are needed to push; when nothing is
    pushed an unset variable leaves them unset (downloads then use the saved login, if any) instead of failing
    the config."""
    hub = data.get("hub")
    if not isinstance(hub, dict) or hub.get("push_to_hub") not in (None, False, "false"):
        return set()
    return {("hub", key) for key in ("token", "repo_id") if isinstance(hub.get(key), str) and "${" in hub[key]}


def _task(data: dict, locator: Locator, issues: list[ConfigIssue], expected: str | None) -> str | None:
    """The config's task, or None (with the issue added) when it is missing, malformed or unknown."""
    task, choices = data.get("task"), ", ".join(TASK_MODELS)
    if task is None and expected is not None and "task" not in data:
        # `autotrain llm --config F` names the task: a config written by hand or for another tool may leave
        # it out, and then the rest of its mistakes are reported at once (the missing task would stop here).
        data["task"] = expected
        return expected
    if task is None:
        if not any(issue.path == ("task",) for issue in issues):  # not already reported by the translation
            missing = f"required field is missing; one of: {choices} (or name it in the command: "
            issues.append(locator.issue(("task",), missing + f"`autotrain llm --config {locator.source}`)"))
        return None
    if not isinstance(task, str):
        issues.append(locator.issue(("task",), f"must be one word, one of: {choices}"))
        return None
    if task not in TASK_MODELS:
        hint = did_you_mean(task, TASK_MODELS)
        issues.append(locator.issue(("task",), f"unknown task `{task}`{hint}; expected one of: {choices}"))
        return None
    if expected is not None and task != expected:
        issues.append(
            locator.issue(
                ("task",),
                f"this is a `{task}` config, not `{expected}`: run `autotrain {task} --config {locator.source}`",
            )
        )
    return task


def _validate(model: type[TaskConfig], data: dict, task: str, locator: Locator, issues: list[ConfigIssue]):
    """Schema and cross-field rules in one pass; the config (None if validation refused it).

    The model runs the rules itself once its fields are valid. When the schema refused some of them, the
    rules run here on the fields that did pass, so that every mistake is reported at once.
    """
    config = None
    try:
        config = model.model_validate(data)
    except ValidationError as exc:
        errors = messages.without_members([e for e in exc.errors() if e["type"] != RULE_ERROR], model)
        # With fields refused by the schema the model's rules did not run: run them on the fields that passed.
        rules = check_rules(model, data, task) if errors else ((tuple(e["loc"]), e["msg"]) for e in exc.errors())
        rule_issues = [locator.issue(p, m) for p, m in rules]
        covered = {issue.path for issue in rule_issues}
        unions = messages.union_members(errors)
        # A misspelt required key is one mistake: report the typo with its suggestion, not also the
        # "missing" field it was meant to be.
        with_missing = {tuple(e["loc"][:-1]) for e in errors if e["type"] == "missing"}
        extra = [e for e in errors if e["type"] == "extra_forbidden"][:SUGGEST_LIMIT]
        typos = {
            tuple(e["loc"][:-1]) + (messages.suggestion(e, model),)
            for e in extra
            if tuple(e["loc"][:-1]) in with_missing
        }
        unknown = 0
        for err in errors:
            loc = tuple(err["loc"])
            if loc in covered or loc[:-1] in covered and err["type"] == "extra_forbidden":
                continue
            if err["type"] == "missing" and loc in typos:
                continue
            if loc[:-1] in unions:  # one line for a value that fits none of a union's types
                if loc[:-1] not in covered:
                    issues.append(locator.issue(loc[:-1], messages.got(messages.union_message(unions[loc[:-1]]), err)))
                    covered.add(loc[:-1])
                continue
            unknown += err["type"] == "extra_forbidden"
            issues.append(locator.issue(loc, messages.message(err, model, suggest=unknown <= SUGGEST_LIMIT)))
        issues += rule_issues
    return config


def _sorted(issues: list[ConfigIssue], secrets: Collection[str] = ()) -> list[ConfigIssue]:
    unique = list({(i.path, i.message): i for i in issues}.values())
    # Messages quote the offending value, which may have come from a secret variable.
    for issue in unique:
        for secret in secrets:
            issue.message = issue.message.replace(secret, REDACTED)
    return sorted(unique, key=lambda i: (i.line is None, i.line or 0, i.col or 0))
