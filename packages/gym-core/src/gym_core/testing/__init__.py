"""Testing gym plugins: real servers on loopback, in threads of the test process, and the conformance kit.

- :func:`running_servers`: a head server and every instance of a config, started and stopped.
- :func:`wait_until`: poll a condition until it holds, failing the test after a timeout.
- The conformance kit: one base test class per server kind, :class:`ResourcesServerTests`,
  :class:`ModelServerTests` and :class:`AgentServerTests`. A plugin's test module subclasses one and
  sets a few class attributes; pytest then checks the whole contract of that kind against the
  plugin's real server (health and readiness, valid tool schemas, seed → tool → verify on the
  plugin's own example data, 4xx JSON errors for malformed bodies, both model endpoints...)::

      import gym_counter.plugin
      from gym_core.testing import ResourcesServerTests

      class TestCounter(ResourcesServerTests):
          server_type = "counter"
          plugins = [gym_counter.plugin]
          example_data = Path(__file__).parents[1] / "data" / "example.jsonl"

Each test's docstring says what it checks and how to fix a failure. The servers of a test class
start once, when its first test runs, and stop after its last. Tests speak plain HTTP (urllib) to
the servers, so they exercise the wire format exactly as any client would.

This package imports pytest; nothing in gym_core imports it. Its modules: ``running`` (servers in
threads, plain HTTP), ``rows`` (example rows and conformance fields), ``kit`` (the base classes of
every kind), ``agents`` (the agent kit) and ``probe`` (the probe servers the agent kit checks
the rollout contract with).
"""

from __future__ import annotations

from gym_core.testing.agents import AgentServerTests
from gym_core.testing.kit import ModelServerTests, ResourcesServerTests, RunningServers, ServerTests
from gym_core.testing.rows import (
    assistant_response,
    conformance_response,
    conformance_reward,
    conformance_tool_calls,
    example_arguments,
    read_rows,
)
from gym_core.testing.running import (
    HTTPCaller,
    Reply,
    assert_json_error,
    assert_ok,
    first_party,
    plugin_manager,
    running_servers,
    start_servers,
    wait_until,
)

__all__ = [
    "running_servers",
    "start_servers",
    "assert_ok",
    "assert_json_error",
    "RunningServers",
    "HTTPCaller",
    "Reply",
    "ServerTests",
    "ResourcesServerTests",
    "ModelServerTests",
    "AgentServerTests",
    "assistant_response",
    "conformance_response",
    "conformance_tool_calls",
    "conformance_reward",
    "example_arguments",
    "read_rows",
    "first_party",
    "plugin_manager",
    "wait_until",
]
