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
import os
import re
from urllib.parse import urlsplit

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


def _token_given(headers, query) -> str:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return query.get("token", "")


def refusal(method: str, path: str, headers, query, token: str | None) -> tuple[int, str] | None:
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
        given = _token_given(headers, query)
        if not hmac.compare_digest(given.encode(), token.encode()):
            return 401, "a token is required: Authorization: Bearer TOKEN, or ?token=TOKEN (printed at start-up)"
    return None
