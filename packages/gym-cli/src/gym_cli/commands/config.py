"""``gym config show`` / ``gym config validate``: the config a ``gym run`` would start, without starting it."""

from __future__ import annotations

import click

__all__ = ["config"]


def _load(args: tuple[str, ...]):
    from gym_cli.launch.launcher import default_env_file, resolve_config, split_config_args

    paths, overrides = split_config_args(args)
    # Ports left 0 stay 0 (a free one is chosen when servers start).
    return resolve_config(paths, overrides, env_file=default_env_file(), allocate_ports=False)


@click.group()
def config() -> None:
    """Resolve and check configs as `gym run` does, without starting anything."""


@config.command()
@click.argument("args", nargs=-1, required=True)
@click.option(
    "--defaults/--no-defaults",
    default=True,
    show_default=True,
    help="Fill in every option a server type has, with its default, where the config leaves it out.",
)
def show(args: tuple[str, ...], defaults: bool) -> None:
    """Print the merged, validated config of CONFIG files and overrides, secrets redacted.

    ARGS are config files (*.yaml) followed by overrides in Hydra's grammar (key=value), as for
    `gym run`. Exits 2, listing every problem, when the config is not valid.

    \b
    Example:
      gym config show plugins/resources/math/configs/math_local.yaml policy_model.temperature=0.2
    """
    import msgspec
    import yaml

    from gym_core.config import validate_instance_options
    from gym_core.plugins import get_plugin_manager

    resolved = _load(args)
    data = resolved.redacted()
    if defaults:
        types = get_plugin_manager().servers()
        for name, instance in resolved.instances.items():
            server_type = types.get(instance.plugin)
            if server_type is None or server_type.config is None:
                continue  # a type installed only in its own venv: its options are shown as written
            options = msgspec.to_builtins(validate_instance_options(resolved, name, server_type.config, types))
            # The config's own values (redacted where secret) win; the rest are the type's defaults.
            data[name] = {"plugin": instance.plugin, **options, **data[name]}
    click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)


@config.command()
@click.argument("args", nargs=-1, required=True)
def validate(args: tuple[str, ...]) -> None:
    """Check CONFIG files and overrides as `gym run` would: exit 0 when valid, else 2 with every problem.

    \b
    Example:
      gym config validate plugins/resources/code_gen/configs/code_gen_local.yaml
    """
    resolved = _load(args)
    kinds = ", ".join(f"{name} ({instance.plugin})" for name, instance in resolved.instances.items())
    click.echo(f"valid: {len(resolved.instances)} server instance{'s' * (len(resolved.instances) != 1)}: {kinds}")
