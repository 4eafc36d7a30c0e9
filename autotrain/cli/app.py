"""`autotrain app`: the local web page (edit configs, start / stop / resume runs, live charts)."""

from __future__ import annotations

from pathlib import Path

import typer

from autotrain.cli.common import EXIT_BAD_INPUT, fail


def app(
    host: str = typer.Option(
        None,
        "--host",
        help="Address to listen on (127.0.0.1; in the Docker image 0.0.0.0); any non-loopback one needs a token, "
        "printed at start-up or taken from AUTOTRAIN_APP_TOKEN.",
        show_default=False,
    ),
    port: int = typer.Option(7860, "--port", help="Port to listen on."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Folder of the runs to list, start and watch."),
    url: str = typer.Option(
        None,
        "--url",
        envvar="AUTOTRAIN_APP_URL",
        help="The address a browser opens to reach the app, printed as is (a container's published port, a proxy).",
        show_default=False,
    ),
    stop_wait: float = typer.Option(
        240,
        "--stop-wait",
        min=0,
        help="Stopped (SIGTERM, Ctrl-C), the app stops its runs, each saving a checkpoint: the most seconds it "
        "waits for them.",
    ),
) -> None:
    """Open a local web app: edit a config in a form, start, stop and resume runs, watch live charts.

    Stopping the app (Ctrl-C, SIGTERM, docker stop) stops its runs the way `autotrain` stops a run: each
    saves a checkpoint and records `interrupted`; Resume continues them once the app is back."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        from autotrain.hints import install_hint

        raise fail(f"the app needs its optional dependencies: {install_hint(extra='app')}", EXIT_BAD_INPUT) from None
    from autotrain.app.listen import PortTaken, bind, default_host, serve, token_problem, url_problem

    host = host or default_host()
    if problem := token_problem() or url_problem(url):
        raise fail(problem, EXIT_BAD_INPUT)
    try:
        sock = bind(host, port)  # before anything is printed: a taken port is said plainly, exit 2
    except PortTaken as exc:
        raise fail(str(exc), EXIT_BAD_INPUT) from None
    raise typer.Exit(serve(sock, host, port, runs_dir, url, stop_wait))
