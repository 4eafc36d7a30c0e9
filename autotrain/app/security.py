"""Who may talk to the app: loopback by default; a token elsewhere; never a page of another site.

- Bound to a loopback address, only requests whose Host is a loopback name are served (a web page on
  another site cannot reach the app through DNS rebinding).
- Bound to any other address, every request but the static assets needs the token printed at start-up
  (`Authorization: Bearer T` or `?token=T`), compared in constant time.
- A request that a browser marks as coming from another site (Origin / Sec-Fetch-Site) is refused, so a
  page elsewhere cannot start a run through the user's browser.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import re
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
# Environment variables whose values are never shown (the names `${VAR}` treats as secret).
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|_KEY$|^KEY$", re.IGNORECASE)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def environment_secrets() -> set[str]:
    """Values of secret-looking environment variables (4+ characters), redacted from every response."""
    return {v for k, v in os.environ.items() if _SECRET_NAME.search(k) and len(v) >= 4}


def _hostname(netloc: str) -> str:
    return urlsplit(f"//{netloc}").hostname or ""


def cookie_name(port: int | None) -> str:
    """One cookie per port: browsers share cookies between the ports of a host, and two apps may run."""
    return f"autotrain-token-{port or 80}"


def _token_given(headers, query, cookies) -> str:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return query.get("token", "") or cookies.get(cookie_name(_port(headers.get("host", ""))), "")


def _port(host: str) -> int | None:
    try:
        return urlsplit(f"//{host}").port
    except ValueError:
        return None


def refusal(method: str, path: str, headers, query, token: str | None, cookies=None) -> tuple[int, str] | None:
    """(status, reason) when the request must be refused, else None."""
    host = headers.get("host", "")
    if token is None and not is_loopback(_hostname(host)):
        return 403, "this app answers on a loopback address only (Host header)"
    if headers.get("sec-fetch-site") == "cross-site":
        return 403, "requests from other sites are refused"
    origin = headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != host:
        return 403, "requests from other sites are refused (Origin)"
    if origin == "null" and method != "GET":
        return 403, "requests from other sites are refused (Origin)"
    if token is not None and not path.startswith("/static/"):
        given = _token_given(headers, query, cookies or {})
        if not given:
            return 401, "a token is required: open the address `autotrain app` printed (it ends in ?token=...)"
        if not hmac.compare_digest(given.encode(), token.encode()):
            return 403, "wrong token: use the one `autotrain app` printed at its last start"
    return None


# Sent with every response. The page loads only its own files; nothing may frame it; no file is sniffed
# into another type; no address (which may hold the token on the first load) leaks as a Referer.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# A run's files are the run's, not the app's: shown sandboxed (no script, no same origin), never framed.
FILE_CSP = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox; frame-ancestors 'none'"
MAX_BODY = 4 * 1024 * 1024  # a 1 MiB config sent as JSON, with room for its escapes


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is refused with a 413, by its Content-Length or,
    without one, as it streams in; a body within it is read here and handed on (so at most `limit`)."""

    def __init__(self, app, limit: int = MAX_BODY):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > self.limit:
            return await self._refuse(send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, _replay([], message), send)  # the client went away
            chunks.append(message.get("body", b""))
            size, more = size + len(chunks[-1]), message.get("more_body", False)
            if size > self.limit:
                return await self._refuse(send)
        await self.app(scope, _replay(chunks, None, receive), send)

    async def _refuse(self, send) -> None:
        body = json.dumps({"error": TooLarge(self.limit).detail})
        headers = [(k.lower().encode(), v.encode()) for k, v in {"Content-Type": "application/json", **HEADERS}.items()]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body.encode()})


def _replay(chunks: list[bytes], last: dict | None, receive=None):
    """A `receive` that gives the body read already, then what the client sends next (a disconnect)."""
    pending = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}] if last is None else [last]

    async def replay():
        return pending.pop() if pending else await receive()

    return replay


class TooLarge(HTTPException):
    """A body over the limit (its message is what the 413 says)."""

    def __init__(self, limit: int):
        super().__init__(413, f"request body over {limit // (1024 * 1024)} MiB; configs are at most 1 MiB")
