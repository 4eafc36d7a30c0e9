"""Is the Hugging Face Hub there for what a config names from it? Asked once, before anything downloads.

Without this, transformers and datasets retry every file for most of a minute (a log line per retry)
before failing. Here the hub is asked once per repository with a short timeout (or, with
`HF_HUB_OFFLINE=1`, the local cache is looked at), and what is missing is said in one line with what to
do. `AUTOTRAIN_SKIP_HUB_CHECK=1` skips the check (a proxy that serves downloads but not the hub's API).
"""

from __future__ import annotations

import os
from pathlib import Path

from autotrain.config.base import TaskConfig
from autotrain.config.paths import hub_id, missing_local_paths

TIMEOUT_S = 5.0
SKIP_ENV = "AUTOTRAIN_SKIP_HUB_CHECK"
_UNREACHED: list[str] = []  # why the hub was out of reach, once this process has found it so
_TRUE = ("1", "true", "yes", "on")


def missing_paths(cfg: TaskConfig) -> list[str]:
    """One line per `base_model` / `data.path` that only a path here can be and that is not on this machine
    (`data.path `x` does not exist ...`): said before anything loads, not as the loader's complaint about hub
    ids."""
    return [f"{'.'.join(path)} {message}" for path, message in missing_local_paths(cfg)]


def offline() -> bool:
    return any(os.environ.get(name, "").lower() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_problems(cfg: TaskConfig) -> list[str]:
    """One line per repository the run cannot get: not on the hub, not in the cache, or no hub at all."""
    if os.environ.get(SKIP_ENV, "").lower() in _TRUE:
        return []
    wanted = [
        (field, repo, kind, revision)
        for field, repo, kind, revision in (
            ("base_model", hub_id(cfg.base_model), "model", cfg.revision),
            *((field, hub_id(path), "dataset", None) for field, path in cfg.data.paths()),
        )
        if repo is not None
    ]
    if not wanted:
        return []
    if offline():
        return [_not_cached(field, repo) for field, repo, kind, revision in wanted if not _cached(repo, kind, revision)]
    token = cfg.hub.token or None
    problems = []
    for field, repo, kind, revision in wanted:
        problem, reachable = _ask_hub(field, repo, kind, revision, token)
        if not reachable:
            _UNREACHED.append(problem)
            names = " and ".join(f"{f} `{r}`" for f, r, _, _ in wanted)
            return [
                f"cannot reach the Hugging Face Hub for {names} ({problem}). Without network, set HF_HUB_OFFLINE=1 "
                "to use what is in the local cache, or give a local path"
            ]
        if problem:
            problems.append(problem)
    return problems


def found_unreachable() -> bool:
    """Whether this process has found the hub out of reach (`hub_problems`): then nothing asks it again (a
    dry run goes on to its estimate, which would ask, download and retry)."""
    return bool(_UNREACHED)


def _ask_hub(field: str, repo: str, kind: str, revision: str | None, token: str | None) -> tuple[str | None, bool]:
    """(problem or None, whether the hub answered at all)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    api = HfApi(token=token)
    info = api.model_info if kind == "model" else api.dataset_info
    try:
        info(repo, revision=revision, timeout=TIMEOUT_S)
    except RevisionNotFoundError:
        return f"{field} `{repo}`: the hub has no revision `{revision}`", True
    except RepositoryNotFoundError:
        return (
            f"{field} `{repo}`: no such {kind} on the Hugging Face Hub (check the name; a private one needs "
            "`hub.token` or `hf auth login`)",
            True,
        )
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status is not None and status < 500:
            return f"{field} `{repo}`: the hub answered {status}: {_first_line(exc)}", True
        return _first_line(exc), False
    except Exception as exc:  # no network, DNS, proxy, timeout: every transport error means the same here
        return _first_line(exc), False
    return None, True


def _cached(repo: str, kind: str, revision: str | None) -> bool:
    from huggingface_hub import constants, snapshot_download

    try:
        snapshot_download(repo, repo_type=kind, revision=revision, local_files_only=True)
        return True
    except Exception:  # LocalEntryNotFoundError and kin: not (completely) in the hub cache
        pass
    if kind == "dataset":  # `datasets` also keeps what it prepared in a cache of its own
        root = os.environ.get("HF_DATASETS_CACHE") or os.path.join(constants.HF_HOME, "datasets")
        return (Path(root) / repo.replace("/", "___")).is_dir()
    return False


def _not_cached(field: str, repo: str) -> str:
    return (
        f"{field} `{repo}` is not in the local cache and HF_HUB_OFFLINE=1 keeps the hub out of reach: download it "
        "once with network, unset HF_HUB_OFFLINE, or give a local path"
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
