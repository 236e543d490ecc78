"""The conformance kit for agents: ``POST /run`` on the example rows, and the rollout contract
checked against a probe environment and a probe model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar



if TYPE_CHECKING:
    pass

from gym_core.testing.kit import NOT_AN_OBJECT, NOT_JSON, RunningServers, ServerTests
from gym_core.testing.rows import read_rows
from gym_core.testing.running import assert_ok

class AgentServerTests(ServerTests):
    """The contract of an agent: ``POST /run`` on task rows returns a reward in range and the response.

    Class attributes, besides those of :class:`ServerTests`:

    - ``model``: the options of the policy model instance (default: the scripted model);
    - ``environment``: the options of the resources server instance (required unless ``instances``);
    - ``example_data``: the task rows to run (a JSONL path, or a list of rows), usually the
      environment's own ``data/example.jsonl``.

    With ``server_type``, the config is ``policy`` (``model``), ``environment`` (``environment``) and
    the agent, named after its server type, with ``model_server: policy``,
    ``resources_server: environment`` and ``options``.

    Hooks: :meth:`run_body` (the ``/run`` body of a row, default the row),
    :meth:`expected_reward` (the reward a row must get, default any in range) and
    :meth:`environment_reward_range` (default: that of the agent's ``resources_server``).
    """

    kind = "agent"
    model: ClassVar[Mapping[str, Any]] = {"plugin": "scripted"}
    environment: ClassVar[Mapping[str, Any] | None] = None
    example_data: ClassVar[str | Path | Sequence[Mapping[str, Any]] | None] = None

    @classmethod
    def instances_config(cls) -> dict[str, Any]:
        if cls.instances is not None or cls.server_type is None:
            return super().instances_config()
        if cls.environment is None:
            raise TypeError(f"{cls.__name__}: set environment (the resources server's options) or instances")
        agent = {"plugin": cls.server_type, "model_server": "policy", "resources_server": "environment", **cls.options}
        return {"policy": dict(cls.model), "environment": dict(cls.environment), cls.server_type: agent}

    def run_body(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The ``POST /run`` body for ``row`` (to add a scripted model's turns to its metadata, say)."""
        return dict(row)

    def expected_reward(self, row: Mapping[str, Any]) -> float | None:
        """The reward the rollout of ``row`` must get (None: any in the environment's ``reward_range``)."""
        return None

    def environment_reward_range(self, servers: RunningServers) -> tuple[float, float]:
        """The ``reward_range`` of the environment the agent plays: its ``resources_server`` option,
        or else the only resources server of the config."""
        named = getattr(servers.server.config, "resources_server", None)
        if named in servers.servers:
            return type(servers.servers[named]).reward_range
        environments = [server for server in servers.servers.values() if server.kind == "resources"]
        assert len(environments) == 1, "override environment_reward_range(): which resources server does the agent play?"
        return type(environments[0]).reward_range

    def test_run_on_the_example_data(self, gym_servers: RunningServers) -> None:
        """``POST /run`` on each example row returns a ``reward`` in the environment's range and the
        ``response`` (a Responses API object with the rollout's output items).

        To fix: in ``run()``, seed the session, call the model (and tools), then ``/verify`` on the
        resources server with the task and the response, and return the verdict's fields with
        ``response`` next to them.
        """
        low, high = self.environment_reward_range(gym_servers)
        rows = read_rows(self.example_data) if self.example_data is not None else []
        assert rows, f"{type(self).__name__}.example_data is not set: point it at the environment's example tasks"
        for index, row in enumerate(rows):
            what = f"example row {index}"
            result = assert_ok(gym_servers.caller().post("/run", self.run_body(row)), f"{what}: POST /run")
            reward = result.get("reward") if isinstance(result, dict) else None
            assert isinstance(reward, (int, float)) and not isinstance(reward, bool), f"{what}: no numeric reward in {result}"
            assert low <= reward <= high, f"{what}: reward {reward} is outside the environment's range ({low}, {high})"
            response = result.get("response")
            assert isinstance(response, dict) and isinstance(response.get("output"), list), f"{what}: no response in {result}"
            expected = self.expected_reward(row)
            if expected is not None:
                assert reward == expected, f"{what}: reward {reward}, expected {expected}: {result}"

    def malformed_bodies(self, servers: RunningServers) -> dict[str, list[bytes]]:
        return {
            "/run": [NOT_JSON, NOT_AN_OBJECT, b"{}", b'{"responses_create_params": 5}'],
            "/v1/responses": [NOT_JSON, NOT_AN_OBJECT, b'{"input": 5}'],
        }
