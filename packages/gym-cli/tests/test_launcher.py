"""Launcher decisions: Ray only when asked for; what the head server publishes about the servers."""

from __future__ import annotations

import subprocess
import sys

import pytest
from rich.console import Console

from gym_core.config import GlobalConfig
from gym_core.errors import GymError

from gym_cli.launch.launcher import _maybe_start_ray


def test_no_ray_unless_asked():
    # In a fresh interpreter: this one may have imported Ray for another test, and taking `ray` out of
    # sys.modules here would leave its submodules behind, breaking every later `import ray`.
    code = (
        "import sys\nfrom rich.console import Console\nfrom gym_core.config import GlobalConfig\n"
        "from gym_cli.launch.launcher import _maybe_start_ray\n"
        "_maybe_start_ray(GlobalConfig({'env': {'plugin': 'counter'}}), [], Console(quiet=True))\n"
        "print('ray' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_asking_for_ray_without_it_is_a_clear_error(monkeypatch):
    # Ray is an optional extra of gym: asking for it without it installed says how to get it.
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as where it is not installed
    config = GlobalConfig({"ray_head_node_address": "ray://10.0.0.1:10001"})
    with pytest.raises(GymError, match="ray_head_node_address is set.*pip install ray"):
        _maybe_start_ray(config, [], Console(quiet=True))
    with pytest.raises(GymError, match="server types sandbox.*pip install ray"):
        _maybe_start_ray(GlobalConfig({}), ["sandbox"], Console(quiet=True))


def test_describing_the_servers_leaves_the_crash_for_gym_run_to_report():
    """Without a head server: what /server_instances publishes is a read."""
    from gym_cli.launch.launcher import Launch
    from gym_cli.launch.supervisor import ChildSpec, Supervisor

    with Supervisor(output=lambda line: None) as supervisor:
        supervisor.start(ChildSpec("env", [sys.executable, "-c", "raise SystemExit(3)"]))
        state = Launch(
            GlobalConfig({}),
            rows=[
                {"name": "env", "kind": "resources", "plugin": "counter", "url": "http://127.0.0.1:1", "venv": "none"}
            ],
            supervisor=supervisor,
        )
        assert supervisor.watch(timeout_s=30)  # the child is done
        listings = [state.describe() for _ in range(3)]
        reported = supervisor.watch(timeout_s=0)
    assert [(row["alive"], row["exit_code"]) for listing in listings for row in listing] == [(False, 3)] * 3
    assert [(e.name, e.returncode) for e in reported] == [("env", 3)]
