"""`autotrain migrate F`: print the native equivalent of an AutoTrain Advanced config."""

from __future__ import annotations

from pathlib import Path

import typer

from autotrain.cli.common import fail, report_config_error
from autotrain.errors import eprint

ORDER = (
    "task",
    "trainer",
    "base_model",
    "project_name",
    "log",
    "data",
    "peft",
    "training_args",
    "distributed",
    "hub",
)


def migrate(
    file: Path = typer.Argument(..., help="An AutoTrain Advanced config.", show_default=False),
    output: Path = typer.Option(None, "--output", "-o", help="Write to a file instead of stdout."),
) -> None:
    """Translate an AutoTrain Advanced config to the native format and print it."""
    import yaml

    from autotrain.config import advanced
    from autotrain.config.load import load_data
    from autotrain.config.yaml_source import read_yaml
    from autotrain.errors import ConfigError, ConfigIssue

    try:
        data, locator = read_yaml(file)
        if not isinstance(data, dict) or not advanced.is_advanced(data):
            raise ConfigError(
                [
                    ConfigIssue(
                        (),
                        "not an AutoTrain Advanced config (no `params:` section "
                        "or `llm-*` task); it needs no migration",
                        source=str(file),
                    )
                ]
            )
        native, renamed, problems, dropped = advanced.translate(data)
        locator.renamed.update(renamed)
        if problems:
            raise ConfigError([locator.issue(p, m) for p, m in problems])
        for path, message in dropped:
            eprint(f"note: {locator.issue(path, message).format()}")
        # Validate the result, with unset ${VARS} allowed: they stay as written in the output.
        load_data(_copy(native), locator, environ=_KeepVars())
    except ConfigError as exc:
        raise report_config_error(exc, file) from None
    token = native.get("hub", {}).get("token") if isinstance(native.get("hub"), dict) else None
    if isinstance(token, str) and token and "${" not in token:
        # A literal token must not be printed, nor written into a file that may be shared or committed.
        native["hub"]["token"] = "${HF_TOKEN}"
        eprint("note: the literal hub token was replaced by `${HF_TOKEN}`; export HF_TOKEN before running")
    ordered = {k: _numbers(native[k]) for k in ORDER if k in native}
    text = f"# Migrated from AutoTrain Advanced config {file.name}\n# run: autotrain {native['task']} --config FILE\n"
    text += yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False)
    if output is None:
        print(text, end="")
    elif output.exists() or output.is_symlink():
        raise fail(f"{output} exists; choose another -o PATH")
    elif not output.parent.is_dir():
        raise fail(f"cannot write {output}: the folder {output.parent} does not exist")
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise fail(f"cannot write {output}: {exc.strerror or exc}") from None
        print(f"wrote {output}")


def _numbers(data):
    """YAML 1.1 reads `3e-5` as a string; write such values back as real numbers."""
    import re

    if isinstance(data, dict):
        return {k: _numbers(v) for k, v in data.items()}
    if isinstance(data, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", data):
        return float(data)
    return data


def _copy(data):
    import copy

    return copy.deepcopy(data)


class _KeepVars(dict):
    """An environment in which every variable is set (to a placeholder), for checking only."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> str:
        return "placeholder"
