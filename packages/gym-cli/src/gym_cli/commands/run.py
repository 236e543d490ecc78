"""``gym run``: start the servers of a config and keep them running until Ctrl+C."""

from __future__ import annotations

import signal

import click

from gym_cli.cli_options import ISOLATION_MODES

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
def run(args: tuple[str, ...], isolation: str, ready_timeout: float) -> None:
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

    paths, overrides = split_config_args(args)
    console = output_console(stderr=True, soft_wrap=True)

    def on_signal(signum, frame):  # the launcher's shutdown then stops the children
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        with launch(
            paths,
            overrides,
            isolation=isolation,
            console=console,
            ready_timeout_s=ready_timeout,
            env_file=default_env_file(),
        ) as state:
            console.print(state.table())
            console.print(
                f"[bold green]All servers ready[/] in {state.ready_after_s:.1f} s "
                f"(head: {state.config.head_url}); Ctrl+C to stop"
            )
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
