"""``gym run``: start the servers of a config and keep them running until Ctrl+C."""

from __future__ import annotations

import signal
import sys
import time

import click
from rich.console import Console
from rich.markup import escape

from gym_core.errors import GymError

from gym_cli._launcher import ISOLATION_MODES, default_env_file, launch


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, required=True)
@click.option("--isolation", type=click.Choice(ISOLATION_MODES), default="uv", show_default=True,
              help="uv: each plugin in its own uv environment; none: everything in this environment.")
@click.option("--ready-timeout", type=float, default=600.0, show_default=True, help="Seconds to wait for all servers.")
def run(args: tuple[str, ...], isolation: str, ready_timeout: float) -> None:
    """Start the head server and every server instance of CONFIG files, then wait for Ctrl+C.

    ARGS are config files (*.yaml) followed by overrides in Hydra's grammar (key=value).

    \b
    Example:
      gym run plugins/resources/counter/configs/counter.yaml policy.delay_s=0.1
    """
    paths = [a for a in args if "=" not in a and not a.startswith(("+", "~"))]
    overrides = [a for a in args if a not in paths]
    console = Console(stderr=True, soft_wrap=True)
    stop = {"signal": None}

    def on_signal(signum, frame):  # forwarded to the children by the launcher's shutdown
        stop["signal"] = signum
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        with launch(paths, overrides, isolation=isolation, console=console, ready_timeout_s=ready_timeout,
                    env_file=default_env_file()) as state:
            console.print(state.table())
            console.print(f"[bold green]All servers ready[/] in {state.ready_after_s:.1f} s "
                          f"(head: {state.config.head_url}); Ctrl+C to stop")
            while True:
                crashed = state.supervisor.poll_crashed()
                if crashed:
                    for name, code, lines in crashed:
                        console.print(f"[bold red]server {name} exited with code {code}[/]; last lines:")
                        for line in lines[-20:]:
                            console.print(f"  [{name}] {line}", markup=False, highlight=False)
                    raise click.exceptions.Exit(1)
                time.sleep(0.5)
    except KeyboardInterrupt:
        console.print("stopping servers…")
    except GymError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True, highlight=False)
        sys.exit(1)
    console.print("all servers stopped")
