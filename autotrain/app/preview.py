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
        from autotrain.run.fit import memory_lines, memory_record, planned

        loaded, refused = await loaded_config(request)
        if refused is not None:
            return refused
        try:
            plan = planned(loaded.config, loaded.config.hub.token)
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
            record = preview_record(loaded.config, resolve_plan(loaded.config), max(1, min(count, MAX_PREVIEW)))
            return with_thumbnails(record)
        except UserInputError as exc:
            return error(400, str(exc))
        except Exception as exc:  # noqa: BLE001 - data or tokenizer that cannot be read: say why, no 500
            return error(422, f"cannot preview this data: {type(exc).__name__}: {exc}")


THUMBNAIL = 96  # pixels, the longer side of an image shown in the Data tab


def with_thumbnails(record: dict) -> dict:
    """Each example whose `image` is a file gets a small PNG of it as a data URI (`thumbnail`), for the Data
    tab to show beside its fields (the page's policy allows data: images; no file is served)."""
    for example in record.get("examples", []):
        path = example.get("image") if isinstance(example, dict) else None
        if isinstance(path, str) and path:
            example["thumbnail"] = _thumbnail(path)
    return record


def _thumbnail(path: str) -> str | None:
    import base64
    import io

    from autotrain.data.images import read_image
    from autotrain.errors import UserInputError

    try:
        image = read_image(path)  # refuses oversized images, names broken ones
    except UserInputError:
        return None
    image.thumbnail((THUMBNAIL, THUMBNAIL))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
