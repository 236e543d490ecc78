"""The gym servers a trainer talks to: served in threads of the trainer's process, or a running ``gym run``.

:class:`GymServers` owns an event loop of its own (a daemon thread) and one pooled
:class:`~gym_core.client.ServerClient` on it, so that the trainer's synchronous callbacks (TRL calls
reward functions and ``rollout_func`` from its training thread) can run many calls at once and wait
for them with a bound (:meth:`GymServers.call`). It also knows, for each task row, which instance
verifies it and which agent runs it (:meth:`GymServers.resources_server_of`,
:meth:`GymServers.agent_of`), and checks a whole dataset against the environments before training
starts (:func:`gym_train.trl.data.validate_rows` uses it).

Two ways to get one:

- :meth:`GymServers.serve`: a gym config's instances in threads of this process (real uvicorn on
  loopback, as ``gym train`` serves them, :class:`gym_train.loop.ServedConfig`); with
  ``policy_model``, that model instance is served by the trainer's own torch model instead
  (:class:`gym_train.trl.policy_server.TrainerPolicyServer`), so that agents' rollouts are generated
  on-policy, token for token;
- :meth:`GymServers.connect`: a running ``gym run``, found by its head server's URL (its token from
  the file ``gym run`` wrote, or ``$GYM_AUTH_TOKEN``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Collection, Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gym_core.client import ServerClient
from gym_core.config import GlobalConfig, load_config, validate_instance_options
from gym_core.errors import GymError, ServerCallError, ServerTimeoutError
from gym_core.options import ClientConfig
from gym_core.plugins import get_plugin_manager
from gym_core.serving import ServerThread

from gym_cli.rollouts import task_agent
from gym_train.loop import POLICY_SERVER_TYPE, ServedConfig, TrainError

__all__ = ["GymServers", "DEFAULT_CLIENT"]

T = TypeVar("T")

# One attempt per request: the adapter retries whole units of work (seed → verify → close, a whole
# /run) in a fresh session, as gym collect does (gym_cli.rollouts.with_retries).
DEFAULT_CLIENT = ClientConfig(timeout_s=300.0, max_attempts=1, deadline_s=600.0)


class GymServers:
    """A gym config's servers and a client for them on an event loop of its own (module docstring).

    Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        config: GlobalConfig,
        *,
        client_config: ClientConfig = DEFAULT_CLIENT,
        kinds: Mapping[str, str | None] | None = None,
        served: Any = None,
        policy: Any = None,
        auth_token: str | None = None,
    ):
        self.config = config
        self.served = served
        # The in-process policy server's engine (``serve(..., policy_model=...)``): rollouts bind the
        # trainer's model to it before they run.
        self.policy = policy
        if kinds is None:
            types = get_plugin_manager().servers()
            kinds = {n: (types[i.plugin].kind if i.plugin in types else None) for n, i in config.instances.items()}
        self.kinds = dict(kinds)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="gym-trl-client", daemon=True)
        self._thread.start()
        self.client = ServerClient(config, config=client_config, auth_token=auth_token)
        self._closed = False

    # --- construction -----------------------------------------------------------------------------

    @classmethod
    def serve(
        cls,
        config_paths: str | Path | Sequence[str | Path],
        overrides: Sequence[str] = (),
        *,
        policy_model: str | None = None,
        instances: Collection[str] | None = None,
        start_timeout_s: float = 180.0,
        client_config: ClientConfig = DEFAULT_CLIENT,
    ) -> GymServers:
        """Serve a gym config's instances (all, or ``instances``) in threads of this process.

        ``policy_model``: a model instance of the config (a ``local_llama`` one: its options and
        protocol are the policy server's) served by the trainer's torch model instead, through
        :class:`~gym_train.trl.policy_server.TrainerPolicyServer`; the rollouts bind the model being
        trained to it (it needs gym-local-llama, whose server it is). Raises
        :class:`~gym_core.errors.GymError` naming what is wrong in the config."""
        paths = [config_paths] if isinstance(config_paths, (str, Path)) else list(config_paths)
        plugins = get_plugin_manager()
        config = load_config(
            paths, overrides, env_file=None, server_types=plugins.servers(), load_errors=plugins.load_errors
        )
        where = ", ".join(str(p) for p in paths)
        wanted = list(config.instances) if instances is None else list(instances)
        unknown = [n for n in wanted if n not in config.instances]
        if unknown:
            raise GymError(
                f"{where}: no instance named {', '.join(map(repr, unknown))} (instances: {', '.join(config.instances)})"
            )
        engine = None
        if policy_model is not None:
            instance = config.instances.get(policy_model)
            if instance is None:
                raise GymError(
                    f"{where}: policy_model {policy_model!r} is not an instance of the config "
                    f"(instances: {', '.join(config.instances)})"
                )
            if instance.plugin != POLICY_SERVER_TYPE:
                raise GymError(
                    f"{where}: policy_model {policy_model!r} is a {instance.plugin!r} server; the trainer "
                    f"serves the policy in place of a {POLICY_SERVER_TYPE!r} instance (same "
                    "options, prompt format, tool-call markup and token history)"
                )
            from gym_train.trl.policy_server import PolicyEngine  # torch, and local_llama's server

            engine = PolicyEngine(n_ctx=int(instance.options.get("n_ctx") or 4096))
            if policy_model not in wanted:
                wanted.append(policy_model)
        served = _ServedForTraining(config, policy_model, engine, wanted, start_timeout_s).start()
        try:
            return cls(config, client_config=client_config, served=served, policy=engine)
        except BaseException:
            served.stop()
            raise

    @classmethod
    def connect(
        cls, head_url: str, *, auth_token: str | None = None, client_config: ClientConfig = DEFAULT_CLIENT
    ) -> GymServers:
        """The servers of a running ``gym run``, found through its head server (its published config)."""
        from gym_core.auth import token_for_head

        async def fetch() -> ServerClient:
            return await ServerClient.from_head(head_url, config=client_config, auth_token=auth_token)

        probe = asyncio.run(fetch())
        token = auth_token or token_for_head(head_url)
        assert probe.global_config is not None
        servers = cls(probe.global_config, client_config=client_config, auth_token=token)
        unknown = [name for name, kind in servers.kinds.items() if kind is None]
        if unknown:  # server types installed only in their own venvs: ask each server what it is
            try:
                kinds = servers.call(
                    _kinds(servers.client, unknown), client_config.timeout_s, "asking the servers' kinds"
                )
            except BaseException:
                servers.close()
                raise
            servers.kinds.update(kinds)
        return servers

    # --- the event loop ---------------------------------------------------------------------------

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float, what: str = "the gym calls") -> T:
        """Run ``coro`` on this object's event loop and wait for it at most ``timeout_s``; past that,
        it is cancelled and a :class:`~gym_core.errors.ServerTimeoutError` raised."""
        if self._closed:
            coro.close()
            raise GymError("these gym servers are closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ServerTimeoutError("gym", "", f"{what} did not finish within {timeout_s:g} s") from None

    # --- rows → instances --------------------------------------------------------------------------

    def instances_of_kind(self, kind: str) -> list[str]:
        return [name for name, k in self.kinds.items() if k == kind]

    def plugin_of(self, instance: str) -> str:
        return self.config.instances[instance].plugin

    def agent_of(self, task: Mapping[str, Any], agent: str | None = None, *, hint: Any = None) -> str:
        """The agent instance that runs ``task``: ``agent`` when given, else the task's ``agent_ref``
        (or ``agent``), else ``hint`` (a row's ``agent`` column, as ``gym export prompts`` writes),
        else the config's only agent. Raises ``ValueError`` saying why none fits."""
        agents = self.instances_of_kind("agent")
        name = agent or task_agent(dict(task)) or (hint if isinstance(hint, str) and hint else None)
        if name is None:
            if len(agents) != 1:
                raise ValueError(
                    f"the row names no agent (agent_ref) and the config has {len(agents)} agents "
                    f"({', '.join(agents) or 'none'}): give rows an agent_ref or pass agent="
                )
            return agents[0]
        if name not in agents:
            raise ValueError(
                f"agent {name!r} is not an agent instance of the config (agents: {', '.join(agents) or 'none'})"
            )
        return name

    def resources_server_of(
        self,
        task: Mapping[str, Any],
        resources_server: str | None = None,
        *,
        agent_hint: Any = None,
        environment_hint: Any = None,
    ) -> str:
        """The resources server instance that verifies ``task``: ``resources_server`` when given, else
        the task's ``resources_server`` field, else the ``resources_server`` option of its agent (the
        task's ``agent_ref``, else ``agent_hint``: a row's ``agent`` column), else the one instance of
        ``environment_hint``'s type (a row's ``environment`` column), else the config's only resources
        server. Raises ``ValueError`` saying why none fits."""
        servers = self.instances_of_kind("resources")
        listed = ", ".join(servers) or "none"
        for name in (resources_server, task.get("resources_server")):
            if isinstance(name, str):
                if name not in servers:
                    raise ValueError(
                        f"{name!r} is not a resources server instance of the config (resources servers: {listed})"
                    )
                return name
        agents = self.instances_of_kind("agent")
        for agent in (task_agent(dict(task)), agent_hint):
            if isinstance(agent, str) and agent in agents:
                named = self.config.instances[agent].options.get("resources_server")
                if isinstance(named, str) and named in servers:
                    return named
        if isinstance(environment_hint, str):
            of_type = [n for n in servers if self.plugin_of(n) == environment_hint]
            if len(of_type) == 1:
                return of_type[0]
        if len(servers) != 1:
            raise ValueError(
                f"cannot tell which environment verifies the row: it names no resources_server and no "
                f"agent with one, and the config has {len(servers)} resources servers ({listed})"
            )
        return servers[0]

    # --- lifecycle ----------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.client.close(), self.loop).result(10)
        except Exception:  # best effort: the pool's sockets die with the loop
            pass
        self._closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if self.served is not None:
            self.served.stop()
        if self.policy is not None:
            self.policy.close()

    def __enter__(self) -> GymServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ServedForTraining(ServedConfig):
    """:class:`gym_train.loop.ServedConfig` for some instances of a config (``instances``), the policy
    instance (if any) served by a :class:`~gym_train.trl.policy_server.TrainerPolicyServer` on its
    host and port, with the instance's own (validated) options."""

    def __init__(
        self,
        config: GlobalConfig,
        policy_instance: str | None,
        engine: Any,
        instances: list[str],
        start_timeout_s: float,
    ):
        super().__init__(config, policy_instance or "", start_timeout_s)
        self.engine = engine
        self.instances = instances

    def _start(self, name: str, config: GlobalConfig) -> None:
        if self.engine is None or name != self.policy_instance:
            return super()._start(name, config)
        from gym_train.trl.policy_server import TrainerPolicyServer

        instance = config.instances[name]
        plugin = self.plugins.server(instance.plugin)
        options = validate_instance_options(config, name, plugin.config, self.plugins.servers())
        server = TrainerPolicyServer(options, name=name, global_config=config, engine=self.engine)
        try:
            self.threads[name] = ServerThread(server.build_app(), instance.host, instance.port).start(
                self.start_timeout_s
            )
        except GymError as exc:
            raise TrainError(f"the policy server {name!r} did not start on port {instance.port}: {exc}") from None

    def stop_instance(self, name: str) -> None:
        """Stop one instance's server (its port is free until :meth:`start_instance`)."""
        self.threads.pop(name).stop()

    def start_instance(self, name: str) -> None:
        """Start one instance's server again, on its port, with its options."""
        self._start(name, self.config)

    def start(self) -> _ServedForTraining:
        try:
            for name in self.instances:
                if self.config.instances[name].replicas > 1:
                    raise TrainError(
                        f"{name}: the trainer serves one replica of each instance, not "
                        f"{self.config.instances[name].replicas}"
                    )
                self._start(name, self.config)
        except BaseException:
            self.stop()
            raise
        return self


async def _kinds(client: ServerClient, names: list[str]) -> dict[str, str | None]:
    """Each server's kind, from its ``GET /health`` (None when it does not answer)."""

    async def kind(name: str) -> str | None:
        try:
            health = await client.get(name, "/health")
        except ServerCallError:
            return None
        return health.get("kind") if isinstance(health, dict) else None

    found = await asyncio.gather(*(kind(n) for n in names))
    return dict(zip(names, found))
