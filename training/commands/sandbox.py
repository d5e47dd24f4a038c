"""`stare sandbox ...`: serve the local sandbox over HTTP with SandboxFusion's wire format."""

from __future__ import annotations

import typer

from envs.sandbox import IsolationUnavailable, LocalSandbox
from envs.sandbox.http_guard import check_bind
from envs.sandbox.server import create_app, server_config

app = typer.Typer(help="The code sandbox (bubblewrap-isolated, SandboxFusion-compatible HTTP server).",
                  no_args_is_help=True)


@app.command()
def serve(host: str = typer.Option("127.0.0.1", help="Interface to bind; keep it local unless firewalled."),
          port: int = typer.Option(8080, help="TCP port (SandboxFusion clients default to 8080)."),
          isolation: str = typer.Option("auto", help="auto | bwrap | subprocess (weaker, opt-in)."),
          max_concurrency: int = typer.Option(0, help="Runs at once; more requests queue. 0 = 2 x cores."),
          workers: int = typer.Option(0, help="Warm workers started at once. 0 = min(4, max_concurrency)."),
          memory_mb: int = typer.Option(1024, help="Memory limit when a request sends no memory_limit_MB."),
          max_sessions: int = typer.Option(16, help="Concurrent /run_jupyter requests (one session each)."),
          token: str = typer.Option("", envvar="STARE_SANDBOX_TOKEN",
                                    help="API token; every request sends 'Authorization: Bearer <token>'."),
          insecure: bool = typer.Option(False, help="Allow a non-loopback --host without a token (warns)."),
          max_body_mb: float = typer.Option(16.0, help="Largest request body in MiB (413 beyond)."),
          request_timeout: float = typer.Option(30.0, help="Seconds a connection gets to send a request.")
          ) -> None:
    """Serve POST /run_code, POST /run_jupyter and GET /v1/ping (SandboxFusion wire format)."""
    import uvicorn

    try:
        check_bind(host, token=token or None, insecure=insecure)
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    try:
        sandbox = LocalSandbox(isolation=isolation, max_concurrency=max_concurrency or None,
                               workers=workers or None, max_sessions=max_sessions)
    except IsolationUnavailable as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    typer.echo(f"sandbox: isolation={sandbox.isolation}, max_concurrency={sandbox.config.concurrency}")
    try:
        app = create_app(sandbox, default_memory_mb=memory_mb, token=token or None,
                         max_body_bytes=int(max_body_mb * (1 << 20)))
        uvicorn.Server(server_config(app, host=host, port=port, request_timeout_s=request_timeout)).run()
    finally:
        sandbox.close()
