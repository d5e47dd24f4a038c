"""`stare envs list`, `stare envs check ID` and `stare envs serve ID`."""

from __future__ import annotations

import typer

import envs

app = typer.Typer(help="Tool environments: list the registered ids, check one, serve one over OpenEnv.",
                  no_args_is_help=True)


@app.command("list")
def list_command() -> None:
    """Show every registered env id (ours and installed plugins) with the first line of its card."""
    from rich.console import Console
    from rich.table import Table

    table = Table("id", "description", box=None, header_style="bold")
    for env_id, summary in envs.list_envs():
        table.add_row(env_id, summary)
    Console(width=160).print(table)


@app.command("check")
def check_command(env_id: str = typer.Argument(..., help="Env id, e.g. stare/PythonTool-v0."),
                  seed: int = typer.Option(0, help="Seed for the resets.")) -> None:
    """Run the conformance checker on one env; exit code 1 when a check fails."""
    try:
        env = envs.make(env_id)
    except envs.UnknownEnvError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    try:
        passed = envs.check_env(env, seed=seed)
    except envs.EnvCheckError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(1) from err
    finally:
        env.close()
    typer.echo(f"{env_id}: passed {len(passed)} checks ({', '.join(passed)})")


_TOKEN_HELP = "Bearer token every request must send (or set STARE_ENV_TOKEN)."
_ENV_ARG = typer.Option(None, "--env-arg",
                        help="KEY=VALUE (JSON value) for envs.make; repeatable, e.g. --env-arg timeout=5.")


@app.command("serve")
def serve_command(env_id: str = typer.Argument(..., help="Env id, e.g. stare/PythonTool-v0."),
                  host: str = typer.Option("127.0.0.1", help="Interface; beyond loopback needs --token."),
                  port: int = typer.Option(8000, help="TCP port."),
                  token: str = typer.Option(None, envvar="STARE_ENV_TOKEN", help=_TOKEN_HELP),
                  insecure: bool = typer.Option(False, help="Serve beyond loopback with no token (unsafe)."),
                  max_sessions: int = typer.Option(64, help="Concurrent sessions (connections) at most."),
                  env_arg: list[str] = _ENV_ARG) -> None:
    """Serve one env as an OpenEnv server: WS /ws, /reset, /step, /state, and MCP tools at /mcp."""
    import uvicorn

    from envs.openenv.server import create_app, is_loopback

    if not (token or insecure or is_loopback(host)):
        typer.echo(f"error: --host {host} is beyond loopback; pass --token (or STARE_ENV_TOKEN), "
                   "or --insecure to serve without one", err=True)
        raise typer.Exit(2)
    if insecure and not token and not is_loopback(host):
        typer.echo(f"warning: serving {env_id} on {host} without a token: anyone who reaches it runs code",
                   err=True)
    try:
        kwargs = _env_kwargs(env_arg or [])
        app = create_app(env_id, env_kwargs=kwargs, max_sessions=max_sessions, token=token)
    except (ValueError, TypeError, KeyError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    typer.echo(f"serving {env_id} (OpenEnv) at http://{host}:{port}  (WS /ws, MCP /mcp, docs /docs)")
    uvicorn.run(app, host=host, port=port, log_level="warning", ws_max_size=16 * 2 ** 20)


def _env_kwargs(pairs: list[str]) -> dict:
    """`["timeout=5", "sandbox=local"]` -> `{"timeout": 5, "sandbox": "local"}` (non-JSON stays a string)."""
    import json

    kwargs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--env-arg {pair!r} must be KEY=VALUE")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return kwargs
