"""``gym run``: start the servers of a config and keep them running until Ctrl+C."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import click

from gym_cli.cli_options import ISOLATION_MODES, progress_option

if TYPE_CHECKING:
    from gym_cli.launch.launcher import Launch
    from gym_cli.live import RunningEvent

__all__ = ["run"]


@click.command()
@click.argument("args", nargs=-1, required=True)
@click.option(
    "--isolation",
    type=click.Choice(ISOLATION_MODES),
    default="venv",
    show_default=True,
    help="venv: each plugin in its own venv; none: every server with the Python running gym.",
)
@click.option("--ready-timeout", type=float, default=600.0, show_default=True, help="Seconds to wait for all servers.")
@progress_option(
    "How the start-up is shown, step by step (each plugin's venv checked, built or reused; the servers "
    "started; each waited for, a model server until its model is loaded, and ready), before the table of "
    'servers: rich and plain, a line each on stderr; json, one JSON object per line on stdout ("startup" '
    'events, then one "running" event with the head URL and every server) and nothing else there: the '
    "servers' output goes to stderr; auto: rich when stderr is a terminal, else plain."
)
def run(args: tuple[str, ...], isolation: str, ready_timeout: float, progress_mode: str) -> None:
    """Start the head server and every server instance of CONFIG files, then wait for Ctrl+C.

    ARGS are config files (*.yaml) followed by overrides in Hydra's grammar (key=value).
    A server that dies after start-up is restarted on its port (its sessions are lost), at most
    `server_restarts.attempts` times (default 3) within `server_restarts.window_s` seconds
    (default 60); `gym status` shows the restarts. Stopped with Ctrl+C or SIGTERM, it exits 0;
    when a server stays down (the restart budget is spent, or it died while starting), it stops
    the others and exits 1 naming that server, its exit status and its last output.

    \b
    Example:
      gym run plugins/resources/counter/configs/counter.yaml policy.delay_s=0.1
    """
    from gym_cli.consoles import output_console
    from gym_cli.launch.launcher import default_env_file, launch, split_config_args
    from gym_cli.launch.supervisor import ChildExitedError
    from gym_cli.live import progress_reporter

    paths, overrides = split_config_args(args)
    console = output_console(stderr=True, soft_wrap=True)

    def on_signal(signum, frame):  # the launcher's shutdown then stops the children
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        with (
            progress_reporter(progress_mode, console) as reporter,
            launch(
                paths,
                overrides,
                isolation=isolation,
                console=console,
                ready_timeout_s=ready_timeout,
                env_file=default_env_file(),
                on_startup=reporter.startup,
            ) as state,
        ):
            console.print(state.table())
            console.print(
                f"[bold green]All servers ready[/] in {state.ready_after_s:.1f} s "
                f"(head: {state.config.head_url}); Ctrl+C to stop"
            )
            reporter.running(running_event(state))  # --progress json: after the table, the last word
            assert state.supervisor is not None  # launch() yields once the servers run
            exited = state.supervisor.watch(interval_s=0.5)
            if exited:
                first = exited[0]
                console.print(f"[bold red]server {first.name} exited[/]; stopping the others…")
                raise ChildExitedError(
                    first.name, first.returncode, first.last_lines[-20:], while_starting=False, restarts=first.restarts
                )
    except KeyboardInterrupt:
        console.print("stopping servers…")
    console.print("all servers stopped")


def running_event(state: Launch) -> RunningEvent:
    """What ``--progress json`` says once the servers of ``state`` are all ready."""
    from gym_cli.live import RunningEvent, RunningServer

    servers = [
        RunningServer(
            name=replica["name"],
            instance=row["name"],
            kind=row["kind"],
            plugin=row["plugin"],
            url=replica["url"],
            venv=row["venv"],
        )
        for row in state.rows
        for replica in row.get("replicas") or [row]
    ]
    return RunningEvent(
        head_url=state.config.head_url, ready_after_s=round(state.ready_after_s or 0.0, 3), servers=servers
    )
