"""The app's "will it fit" and "what will it train on" answers: the memory estimate beside the config and the
Data tab's preview, both for the YAML in the editor (the same code as the dry run and `--preview`)."""

from __future__ import annotations

from fastapi import FastAPI, Request

from autotrain.app import configs

MAX_PREVIEW = 50


def add_routes(app: FastAPI) -> None:
    error = app.state.error

    async def loaded_config(request: Request):
        text = (await request.body()).decode("utf-8", errors="replace")
        result, loaded = configs.check(text)
        return (loaded, None) if loaded is not None else (None, error(400, "the config has problems", **result))

    @app.post("/api/estimate")
    async def estimate(request: Request):
        """The memory estimate per device for the posted YAML, and its lines as the dry run prints them."""
        from autotrain.errors import UserInputError
        from autotrain.run.fit import memory_lines, memory_record
        from autotrain.training.plan import resolve_plan

        loaded, refused = await loaded_config(request)
        if refused is not None:
            return refused
        try:
            plan = resolve_plan(loaded.config)
        except UserInputError as exc:
            return error(400, str(exc))
        record = memory_record(loaded.config, plan, loaded.config.hub.token)
        return {"memory": record, "lines": memory_lines(record)}

    @app.post("/api/preview")
    async def preview(request: Request, count: int = 5):
        """The first `count` training examples of the posted YAML as the trainer sees them."""
        from autotrain.errors import UserInputError
        from autotrain.run.preview import preview_record
        from autotrain.training.plan import resolve_plan

        loaded, refused = await loaded_config(request)
        if refused is not None:
            return refused
        try:
            return preview_record(loaded.config, resolve_plan(loaded.config), max(1, min(count, MAX_PREVIEW)))
        except UserInputError as exc:
            return error(400, str(exc))
        except Exception as exc:  # noqa: BLE001 - data or tokenizer that cannot be read: say why, no 500
            return error(422, f"cannot preview this data: {type(exc).__name__}: {exc}")
