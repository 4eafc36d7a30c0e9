"""Where the app listens and the addresses it prints: the port is taken before anything is announced, in
token mode the printed addresses are ones another machine can open, and in a container (where the host port
published for the app's port is not known inside) the app says the port it listens on and that the browser
uses the published one, unless the address to open is given (--url, AUTOTRAIN_APP_URL)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from pathlib import Path

from autotrain.app import security

ANY = ("0.0.0.0", "::", "")
# Set by the Docker image: the app listens on every interface there (the host reaches it through -p), and
# the addresses worth printing are the host's, not the container's.
CONTAINER = "AUTOTRAIN_CONTAINER"
TOKEN_VARIABLE = "AUTOTRAIN_APP_TOKEN"
URL_VARIABLE = "AUTOTRAIN_APP_URL"
MIN_TOKEN = 16


def default_host() -> str:
    return "0.0.0.0" if os.environ.get(CONTAINER) else "127.0.0.1"


def token_problem() -> str | None:
    """What is wrong with the token given in AUTOTRAIN_APP_TOKEN, if one is given."""
    given = os.environ.get(TOKEN_VARIABLE, "")
    if given and (len(given) < MIN_TOKEN or not given.isascii() or not given.isprintable() or " " in given):
        return f"{TOKEN_VARIABLE} must be at least {MIN_TOKEN} printable ASCII characters without spaces"
    return None


class PortTaken(OSError):
    """The port cannot be listened on; the message names it and says what to do."""


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or PortTaken with the reason (in use, not allowed, no such address)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: TIME_WAIT is no conflict
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            taken = f"port {port} on {host} is in use by another program"
            raise PortTaken(f"{taken}; pick another: autotrain app --port {port + 1}") from None
        if exc.errno == errno.EACCES:
            raise PortTaken(f"port {port} needs privileges on this machine; pick one above 1023: --port 7860") from None
        raise PortTaken(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def _own_addresses() -> list[str]:
    """This machine's non-loopback IP addresses (the route out first), best effort and offline."""
    found: list[str] = []
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
        found.append(probe.getsockname()[0])
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.append(info[4][0])
    return [a for a in dict.fromkeys(found) if not security.is_loopback(a) and a not in ANY]


def addresses(host: str, port: int) -> list[str]:
    """URLs of the app: for a wildcard host, the machine's name and addresses (what others can open)."""
    if host not in ANY:
        return [f"http://{f'[{host}]' if ':' in host else host}:{port}/"]
    names = [socket.gethostname(), *_own_addresses()]
    return [f"http://{name}:{port}/" for name in dict.fromkeys(n for n in names if n)]


def url_problem(url: str | None) -> str | None:
    if url and not (url.startswith(("http://", "https://")) and len(url) > len("https://")):
        return f"--url / {URL_VARIABLE} must be the address a browser opens, http://HOST[:PORT][/PATH]: `{url}`"
    return None


def announce(host: str, port: int, token: str | None, url: str | None = None) -> list[str]:
    """The lines that tell where to open the app: the address given (`url`), else, in a container listening
    for the host, the port it listens on and the host port to use instead, else its own addresses."""
    query = f"?token={token}" if token else ""
    if url:
        return [f"autotrain app: {url.rstrip('/')}/{query}", f"(listening on {host}:{port})"]
    if os.environ.get(CONTAINER) and host in ANY:
        return [
            f"autotrain app: listening on port {port} inside the container; a browser on the host uses the port "
            f"published for it",
            f"open http://localhost:HOST_PORT/{query} from the host, HOST_PORT being N of `docker run -p N:{port}` "
            f"(`docker port CONTAINER {port}` shows it); with -e {URL_VARIABLE}=http://localhost:N the app prints "
            "the whole address",
        ]
    return [f"autotrain app: {address}{query}" for address in addresses(host, port)]


def serve(sock: socket.socket, host: str, port: int, runs_dir: Path, url: str | None = None, stop_wait: float = 240):
    """Run the app on `sock` until SIGTERM or Ctrl-C, which stop its runs cleanly (app/lifecycle.py); returns
    the exit code."""
    import secrets as random

    import uvicorn

    from autotrain.app.lifecycle import serve_until_stopped, take_over
    from autotrain.app.server import create_app

    token = None if security.is_loopback(host) else os.environ.get(TOKEN_VARIABLE) or random.token_urlsafe(24)
    app = create_app(runs_dir, Path.cwd(), token=token)
    take_over(app.state.runs)
    for line in announce(host, port, token, url):
        print(line, flush=True)
    print(f"runs dir: {runs_dir}", flush=True)
    if token:
        print(
            "every request needs the token: open an address above once (the page keeps it in a cookie), "
            "or send Authorization: Bearer TOKEN",
            flush=True,
        )
    # A short grace for open requests (a chat reply streaming): the runs' checkpoints matter more.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
    return serve_until_stopped(server, sock, app.state.runs, stop_wait)
