"""A run's model card (its README.md) as HTML for the page, rendered safely.

markdown-it-py (already installed with rich) renders CommonMark and tables; raw HTML in the card is
escaped, not passed through, and its link check drops `javascript:`, `vbscript:`, `file:` and non-image
`data:` URLs. Links and images relative to the run folder point at the run's files; other links open in a
new tab without a referrer. The YAML front matter (the hub's metadata) is not part of the card's text.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from urllib.parse import quote, urlsplit

from fastapi import FastAPI

from autotrain.app.paths import run_folder

CARD = "README.md"
MAX_CARD = 512 * 1024
_FRONT_MATTER = re.compile(r"\A---\r?\n.*?\r?\n---\r?\n", re.DOTALL)


def _local(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or url.startswith(("/", "#")):
        return False
    return ".." not in PurePosixPath(parts.path).parts


def render(text: str, run: str) -> str:
    """The card's markdown as HTML; paths relative to the run folder become links to the run's files."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(_FRONT_MATTER.sub("", text, count=1))
    base = f"/api/runs/{quote(run)}/files/"
    for token in tokens:
        for child in token.children or []:
            attr = {"image": "src", "link_open": "href"}.get(child.type)
            url = child.attrGet(attr) if attr else None
            if not isinstance(url, str):
                continue
            if _local(url):
                child.attrSet(attr, base + quote(urlsplit(url).path))
            elif child.type == "link_open":
                child.attrSet("target", "_blank")
                child.attrSet("rel", "noopener noreferrer")
    return md.renderer.render(tokens, md.options, {})


def routes(app: FastAPI, runs) -> None:
    error = app.state.error

    @app.get("/api/runs/{name}/card")
    def card(name: str):
        file = run_folder(runs.root, name) / CARD
        if not file.is_file() or file.is_symlink():
            return error(404, f"run `{name}` has no model card yet (it is written when the run completes)")
        if file.stat().st_size > MAX_CARD:
            return error(415, f"the model card is over {MAX_CARD // 1024} KiB; open README.md instead")
        return {"html": render(file.read_text(encoding="utf-8", errors="replace"), name)}
