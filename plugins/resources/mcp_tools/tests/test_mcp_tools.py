"""Tests of the mcp_tools plugin, real servers on loopback and real MCP servers written with the
official ``mcp`` SDK (its MCPServer, over stdio): gym's conformance kit for a resources server, then
what is particular to this one (the row's verify rules, sessions apart, failures typed).

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too; it
is skipped where they are not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gym_core import PluginManager, ServerClient
from gym_core.testing import (
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_mcp_tools.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIG = PACKAGE / "configs" / "mcp_tools.yaml"
FAILING = Path(__file__).resolve().parent / "failing_mcp_server.py"
ADD_TASK = {"responses_create_params": {"input": "What is 12 + 30?"}}


def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_mcp_tools.plugin, *others)


def example_config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


class TestMcpTools(ResourcesServerTests):
    server_type = "mcp_tools"
    plugins = [gym_mcp_tools.plugin]
    options = {"command": [sys.executable, "-m", "gym_mcp_tools.example_server"]}
    example_data = PACKAGE / "data" / "example.jsonl"

    def test_the_mcp_servers_tools_are_the_environments(self, gym_servers: RunningServers):
        tools = {t["name"]: t for t in gym_servers.caller().get("/tools").json()}
        assert sorted(tools) == ["add", "read_note", "write_note"]
        assert tools["add"]["description"] == "Add two numbers and return their sum."
        assert tools["add"]["parameters"]["required"] == ["a", "b"]

    def test_right_calls_score_1_wrong_calls_0(self, gym_servers: RunningServers):
        row = {
            **ADD_TASK,
            "expected_answer": "42",
            "expected_calls": [{"name": "add", "arguments": {"a": 12, "b": 30}}],
        }
        right, wrong = gym_servers.caller(), gym_servers.caller()
        right.post("/seed_session", row)
        wrong.post("/seed_session", row)
        assert right.post("/tools/add", {"a": 12, "b": 30}).json() == {"result": 42.0}
        assert wrong.post("/tools/add", {"a": 12, "b": 31}).json() == {"result": 43.0}
        good = right.post("/verify", {**row, "response": assistant_response("42")}).json()
        bad = wrong.post("/verify", {**row, "response": assistant_response("42")}).json()
        assert (good["reward"], good["failed"], good["tool_calls"]) == (1.0, [], 1)
        assert (bad["reward"], bad["failed"]) == (0.0, ["expected_calls[0]"])

    def test_checks_read_the_state_the_episode_left_and_sessions_are_apart(self, gym_servers: RunningServers):
        row = {**ADD_TASK, "checks": [{"name": "read_note", "arguments": {"key": "todo"}, "expected": "milk"}]}
        writer, other = gym_servers.caller(), gym_servers.caller()
        writer.post("/seed_session", row)
        other.post("/seed_session", row)
        writer.post("/tools/write_note", {"key": "todo", "text": "milk"})
        # Over stdio each session has its own MCP server process: the note is the writer's only.
        assert other.post("/tools/read_note", {"key": "todo"}).json() == {"result": ""}
        response = assistant_response("done")
        assert writer.post("/verify", {**row, "response": response}).json()["reward"] == 1.0
        assert other.post("/verify", {**row, "response": response}).json()["reward"] == 0.0

    def test_a_tool_outside_the_rows_allowed_tools_is_unknown(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/seed_session", {**ADD_TASK, "allowed_tools": ["read_note"]})
        reply = caller.post("/tools/add", {"a": 1, "b": 2})
        assert (reply.status, reply.json()["error"]["type"]) == (404, "unknown_tool")
        assert caller.post("/tools/read_note", {"key": "k"}).status == 200
        bad = gym_servers.caller().post("/seed_session", {**ADD_TASK, "allowed_tools": ["nope"]})
        assert (bad.status, bad.json()["error"]["type"]) == (422, "validation_error")
        assert "nope" in bad.json()["error"]["message"]

    def test_bad_arguments_and_rows_without_a_rule_are_4xx_naming_them(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/seed_session", ADD_TASK)
        reply = caller.post("/tools/add", {"a": "twelve", "b": 30})
        assert (reply.status, reply.json()["error"]["type"]) == (422, "validation_error")
        assert "at a" in reply.json()["error"]["message"]
        verdict = caller.post("/verify", {**ADD_TASK, "response": assistant_response("42")})
        assert verdict.status == 422 and "expected_answer" in verdict.json()["error"]["message"]

    def test_a_tool_called_before_seeding_is_a_lost_session(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/tools/add", {"a": 1, "b": 2})
        assert (reply.status, reply.json()["error"]["type"]) == (409, "session_expired")


class TestFailingMcpServer:
    """An MCP server that errs, hangs or dies: a tool error the model sees, or a typed
    infrastructure failure (502 mcp_server_failed), never a reward."""

    @pytest.fixture(scope="class")
    @classmethod
    def servers(cls):
        config = {"env": {"plugin": "mcp_tools", "command": [sys.executable, str(FAILING)], "call_timeout_s": 2}}
        with RunningServersFor(config) as servers:
            yield servers

    def test_a_tool_error_is_the_models_to_see(self, servers):
        caller = servers.caller()
        caller.post("/seed_session", ADD_TASK)
        reply = caller.post("/tools/fail", {"reason": "no such file"})
        assert (reply.status, reply.json()["error"]["type"]) == (400, "tool_error")
        assert reply.json()["error"]["message"].endswith("no such file")

    def test_a_protocol_error_for_arguments_is_the_models_other_errors_are_the_servers(self, servers):
        caller = servers.caller()
        caller.post("/seed_session", ADD_TASK)
        rejected = caller.post("/tools/reject", {"value": "x"})
        assert (rejected.status, rejected.json()["error"]["type"]) == (400, "tool_error")
        assert "is not one I take" in rejected.json()["error"]["message"]
        crashed = caller.post("/tools/crash", {})
        assert (crashed.status, crashed.json()["error"]["type"]) == (502, "mcp_server_failed")

    def test_a_hanging_server_is_a_typed_failure(self, servers):
        caller = servers.caller()
        caller.post("/seed_session", ADD_TASK)
        reply = caller.post("/tools/hang", {"seconds": 30})
        assert (reply.status, reply.json()["error"]["type"]) == (502, "mcp_server_failed")
        assert "within 2 s" in reply.json()["error"]["message"]

    def test_a_dead_server_is_a_typed_failure_and_stays_one(self, servers):
        caller = servers.caller()
        caller.post("/seed_session", ADD_TASK)
        first = caller.post("/tools/die", {})
        assert (first.status, first.json()["error"]["type"]) == (502, "mcp_server_failed")
        again = caller.post("/tools/fail", {"reason": "x"})
        assert (again.status, again.json()["error"]["type"]) == (502, "mcp_server_failed")
        verdict = caller.post(
            "/verify",
            {
                **ADD_TASK,
                "checks": [{"name": "fail", "arguments": {"reason": "x"}, "expected": "x"}],
                "response": assistant_response(""),
            },
        )
        assert (verdict.status, verdict.json()["error"]["type"]) == (502, "mcp_server_failed")


@pytest.fixture(scope="module")
def http_mcp_server():
    """The example MCP server serving Streamable HTTP (the SDK's own), in a process of its own."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "gym_mcp_tools.example_server", "--http", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert process.poll() is None and time.monotonic() < deadline, "the HTTP MCP server did not start"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(30)


def test_an_http_mcp_server_serves_every_session(http_mcp_server: str):
    config = {"env": {"plugin": "mcp_tools", "url": http_mcp_server}}
    row = {**ADD_TASK, "checks": [{"name": "read_note", "arguments": {"key": "k"}, "expected": "v"}]}
    with RunningServersFor(config) as servers:
        assert sorted(t["name"] for t in servers.caller().get("/tools").json()) == ["add", "read_note", "write_note"]
        writer, reader = servers.caller(), servers.caller()
        writer.post("/seed_session", row)
        reader.post("/seed_session", row)
        assert writer.post("/tools/add", {"a": 2, "b": 3}).json() == {"result": 5.0}
        writer.post("/tools/write_note", {"key": "k", "text": "v"})
        # One server behind the URL: its state is shared by the sessions (the README says so).
        assert reader.post("/verify", {**row, "response": assistant_response("")}).json()["reward"] == 1.0


# The server thread ends with the start-up error: expected here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_url_nobody_serves_fails_the_start_up():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = {"env": {"plugin": "mcp_tools", "url": f"http://127.0.0.1:{port}/mcp", "connect_timeout_s": 10}}
    with pytest.raises(Exception, match="failed to start"):
        with RunningServersFor(config):
            pass


# The server thread ends with the start-up error: expected here.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_server_that_cannot_start_fails_the_start_up():
    config = {
        "env": {
            "plugin": "mcp_tools",
            "command": [sys.executable, "-c", "import sys; sys.exit(1)"],
            "connect_timeout_s": 20,
        }
    }
    # The server does not start (its start-up names the MCP server's failure in its log).
    with pytest.raises(Exception, match="failed to start"):
        with RunningServersFor(config):
            pass


class RunningServersFor:
    """The instances of ``config`` running, with callers of the first one (a kit without its tests)."""

    def __init__(self, config: dict):
        self.config = config

    def __enter__(self) -> RunningServers:
        from gym_core.auth import new_token
        from gym_core.testing.running import start_servers

        self._context = start_servers({"auth_token": new_token(), **self.config}, plugins())
        global_config, servers = self._context.__enter__()
        return RunningServers(global_config, servers, next(iter(self.config)))

    def __exit__(self, *exc) -> None:
        self._context.__exit__(*exc)


async def test_example_config_solves_every_example():
    # The scripted model makes the row's conformance tool calls, then gives its answer.
    manager = plugins(*first_party("scripted", "simple_agent"))
    with running_servers(example_config(), plugins=manager) as config:
        async with ServerClient(config) as client:
            for task in read_rows(PACKAGE / "data" / "example.jsonl"):
                conformance = task["conformance"]
                script = [{"tool_calls": conformance["tool_calls"]}, {"text": conformance["response"]}]
                params = {**task["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**task, "responses_create_params": params})
                assert result["reward"] == conformance["reward"], result


def test_a_session_evicted_for_room_has_its_mcp_server_closed():
    command = [sys.executable, "-m", "gym_mcp_tools.example_server"]
    with RunningServersFor({"env": {"plugin": "mcp_tools", "command": command, "max_sessions": 1}}) as servers:
        first, second = servers.caller(), servers.caller()
        first.post("/seed_session", ADD_TASK)
        second.post("/seed_session", ADD_TASK)  # evicts the first session: the store holds one
        assert len(servers.server._connections) == 1  # one MCP server process, not one per session ever seeded
        assert first.post("/tools/add", {"a": 1, "b": 2}).status == 409
        assert second.post("/tools/add", {"a": 1, "b": 2}).json() == {"result": 3.0}
