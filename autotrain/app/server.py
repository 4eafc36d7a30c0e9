"""The app's HTTP side: the page, its static assets and the JSON API it uses.

Every path in a request is confined to the runs dir (or to the package's static folder), every JSON
response is passed through the config redaction (secret values and `token`-like keys become `***`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Body, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from autotrain.app import card, chat, configs, export_api, preview, runinfo, security
from autotrain.app.paths import (
    PathRejected,
    PathTaken,
    config_file,
    config_to_save,
    confine,
    project_folder,
    run_folder,
)
from autotrain.app.runs import RunConflict, Runs
from autotrain.config.interpolate import redact

STATIC = Path(__file__).resolve().parent / "static"
TEXT_SUFFIXES = {".json", ".jsonl", ".yaml", ".yml", ".md", ".log", ".txt", ".jinja"}
IMAGE_SUFFIXES = {".png": "image/png", ".svg": "image/svg+xml"}
MAX_TEXT = 2 * 1024 * 1024


def create_app(runs_dir: str | Path, workdir: str | Path | None = None, token: str | None = None) -> FastAPI:
    """The app for `runs_dir`; training children run in `workdir` (default: the current directory).

    With `token`, every request but the static assets must carry it (the app is reachable from elsewhere);
    without, only loopback Host names are answered.
    """
    runs = Runs(Path(runs_dir), Path(workdir or Path.cwd()).resolve())
    runs.root.mkdir(parents=True, exist_ok=True)

    def secrets() -> set[str]:
        return security.environment_secrets() | runs.secrets

    class Redacted(JSONResponse):
        def render(self, content: Any) -> bytes:
            return super().render(redact(content, secrets()))

    app = FastAPI(title="autotrain", docs_url=None, redoc_url=None, openapi_url=None, default_response_class=Redacted)
    app.state.runs = runs
    app.state.token = token
    app.state.error = lambda status, message, **more: Redacted({"error": message, **more}, status_code=status)
    app.state.text = lambda text: PlainTextResponse(redact(text, secrets()))
    app.state.secrets = secrets

    @app.middleware("http")
    async def guard(request: Request, call_next):
        refused = security.refusal(
            request.method, request.url.path, request.headers, request.query_params, token, request.cookies
        )
        if refused is not None:
            api = request.url.path.startswith("/api/")
            response = JSONResponse({"error": refused[1]}, refused[0]) if api else PlainTextResponse(*refused[::-1])
        else:
            response = await call_next(request)
            if token and request.query_params.get("token") == token and request.url.path == "/":
                # the page drops ?token= from its address; from now on the cookie carries it
                name = security.cookie_name(request.url.port)
                response.set_cookie(name, token, httponly=True, samesite="strict", path="/")
        for key, value in security.HEADERS.items():
            response.headers.setdefault(key, value)
        return response

    app.add_middleware(security.BodyLimit)

    @app.exception_handler(PathRejected)
    async def rejected(request: Request, exc: PathRejected) -> JSONResponse:
        return app.state.error(400, str(exc))

    @app.exception_handler(PathTaken)
    async def taken(request: Request, exc: PathTaken) -> JSONResponse:
        return app.state.error(409, str(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return app.state.error(exc.status_code, str(exc.detail))

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    _config_routes(app, runs)
    _saved_config_routes(app, runs)
    _run_routes(app, runs)
    card.routes(app, runs)
    chat.routes(app, runs)
    export_api.register(app, runs)  # the Export action on a finished run
    preview.add_routes(app)  # the memory estimate and the Data tab
    return app


def _config_routes(app: FastAPI, runs: Runs) -> None:
    error = app.state.error

    @app.post("/api/validate")
    async def validate(request: Request):
        body = await request.body()
        if configs.too_large(body):
            return error(413, configs.too_large(body))
        result, _ = configs.check(body.decode("utf-8", errors="replace"))
        return result

    @app.post("/api/yaml/set")
    def yaml_set(body: dict):
        """Set one field in YAML text (the form's edits), keeping the rest; returns the text, validated."""
        import yaml

        from autotrain.app.yaml_edit import set_value

        path, text = body.get("path"), body.get("text") or ""
        if not isinstance(path, list) or not all(isinstance(p, str) for p in path) or not path:
            return error(400, "path must be a list of keys")
        if not isinstance(text, str):
            return error(400, "text must be the YAML, as a string")
        if configs.too_large(text):
            return error(413, configs.too_large(text))
        try:
            text = set_value(text, path, body.get("value"), bool(body.get("unset")))
        except yaml.YAMLError as exc:
            return error(400, f"cannot edit this YAML: {str(exc)[:500]}")
        result, _ = configs.check(text)
        return {"text": text, **result}

    @app.get("/api/templates")
    def templates() -> list:
        return configs.list_templates()

    @app.get("/api/schema")
    def schema_index() -> dict:
        """The tasks the page offers; each task's own lists come from its schema below."""
        from autotrain.config.templates import TASKS

        return {"tasks": list(TASKS)}

    @app.get("/api/schema/{task}")
    def schema(task: str):
        from autotrain.config.templates import TASKS

        if task not in TASKS:
            return error(404, f"unknown task `{task}`; one of: {', '.join(TASKS)}")
        return configs.task_schemas(task)


def _saved_config_routes(app: FastAPI, runs: Runs) -> None:
    """Config files kept in the runs dir: list, open, save."""
    error = app.state.error

    @app.get("/api/configs")
    def list_configs() -> list:
        """Configs to open and save: not a run's own `autotrain.yaml` (that is the record of the run)."""
        root = runs.root.resolve()
        found = [p for pattern in ("*.y*ml", "*/*.y*ml") for p in root.glob(pattern)]
        found = [p for p in found if p.suffix in (".yml", ".yaml")]
        mine = [p for p in found if p.parent == root or not runinfo.is_run(p.parent)]
        return sorted(p.relative_to(root).as_posix() for p in mine)[:500]

    @app.get("/api/configs/{path:path}")
    def read_config(path: str):
        file = config_file(runs.root, path)
        if not file.is_file():
            return error(404, f"no config `{path}` in the runs dir")
        return {"path": path, "text": file.read_text(encoding="utf-8", errors="replace")}

    @app.put("/api/configs/{path:path}")
    async def save_config(path: str, request: Request):
        body = await request.body()
        if configs.too_large(body):
            return error(413, configs.too_large(body))
        file = save(runs, path, body)
        return {"path": file.relative_to(runs.root.resolve()).as_posix(), "saved": True}


def _run_routes(app: FastAPI, runs: Runs) -> None:
    error = app.state.error

    @app.get("/api/runs")
    def list_runs() -> list:
        return [runs.summary(name) for name in runs.names()]

    @app.get("/api/runs/{name}")
    def run_detail(name: str, since: int = 0):
        try:
            return runs.detail(name, max(since, 0))
        except FileNotFoundError:
            return error(404, f"no run `{name}` in the runs dir")

    @app.post("/api/runs")
    def start(body: dict):
        return _start(app, runs, body)

    @app.post("/api/runs/{name}/stop")
    def stop(name: str):
        try:
            return runs.stop(name)
        except RunConflict as exc:
            return error(409, str(exc))

    @app.post("/api/runs/{name}/resume")
    def resume(name: str, body: dict | None = Body(default=None)):
        """`{"accept_changes": true}`: go on with a config that differs from the run's (`--accept-changes`)."""
        if not run_folder(runs.root, name).is_dir():
            return error(404, f"no run `{name}` in the runs dir")
        accept = (body or {}).get("accept_changes", False)
        if not isinstance(accept, bool):
            return error(400, "accept_changes must be true or false")
        try:
            return runs.resume(name, accept_changes=accept)
        except RunConflict as exc:
            return error(409, str(exc))

    @app.get("/api/runs/{name}/files/{path:path}")
    def run_file(name: str, path: str) -> Response:
        file = confine(run_folder(runs.root, name), path)
        if not file.is_file():
            return error(404, f"no file `{path}` in run `{name}`")
        headers = {"Cache-Control": "no-store", "Content-Security-Policy": security.FILE_CSP}
        if file.suffix in IMAGE_SUFFIXES:
            if file.suffix == ".svg":  # an SVG may hold a script: never shown in the app's origin
                headers["Content-Disposition"] = "attachment"
            return FileResponse(file, media_type=IMAGE_SUFFIXES[file.suffix], headers=headers)
        if file.suffix not in TEXT_SUFFIXES or file.stat().st_size > MAX_TEXT:
            return error(415, "only text files (up to 2 MB) and images are shown")
        response = app.state.text(file.read_text(encoding="utf-8", errors="replace"))
        response.headers.update(headers)
        return response


def save(runs: Runs, relative: str, content: bytes) -> Path:
    """Write a config into the runs dir (never into a run's folder, onto a folder or under a file)."""
    file = config_to_save(runs.root, relative, runinfo.is_run)
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(content)
    except OSError as exc:
        raise PathTaken(f"cannot save `{relative}`: {exc.strerror or exc}") from None
    return file


def _start(app: FastAPI, runs: Runs, body: dict):
    """Validate the config, check where it trains, save it in the runs dir, start the child."""
    error = app.state.error
    save_as = body.get("save_as")
    if save_as is not None and not isinstance(save_as, str):
        return error(400, "save_as must be a file name (NAME.yml), as a string")
    if isinstance(body.get("path"), str):
        file = config_file(runs.root, body["path"])
        if not file.is_file():
            return error(404, f"no config `{body['path']}` in the runs dir")
        text = file.read_text(encoding="utf-8", errors="replace")
    elif isinstance(body.get("yaml"), str):
        file, text = None, body["yaml"]
    else:
        return error(400, 'give {"yaml": TEXT} or {"path": "FILE.yml"} (a file inside the runs dir)')
    if configs.too_large(text):
        return error(413, configs.too_large(text))
    result, loaded = configs.check(text, (file.name if file else save_as) or "config.yml")
    if loaded is None:
        return error(400, "the config has problems; nothing was run", **result)
    missing = configs.missing_paths(loaded, runs.workdir)
    if missing:
        return error(400, "; ".join(missing) + "; nothing was run")
    folder = project_folder(runs.root, runs.workdir, loaded.config.project_name)
    with runs.lock:  # from the folder's checks to the child's start: one run per folder
        try:
            runs.claim(folder)
        except RunConflict as exc:
            return error(409, str(exc))
        if file is None:
            file = save(runs, save_as or f"{folder.name}.yml", text.encode("utf-8"))
        runs.secrets |= configs.secrets_of(loaded)
        return runs.start(folder.name, file)
