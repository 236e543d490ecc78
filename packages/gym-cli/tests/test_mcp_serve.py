"""``gym mcp serve``: a gym environment's episode served over MCP, driven by the official ``mcp``
SDK's client, over stdio (the client starts the command) and Streamable HTTP. The environment is
the counter, started in the command's process; its verify gives 1 for the right actions, 0 for
wrong ones, and the rollout row lands in --output."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
COUNTER_ROWS = ROOT / "plugins" / "resources" / "counter" / "data" / "example.jsonl"


def serve_args(*extra: str) -> list[str]:
    return ["-m", "gym_cli", "mcp", "serve", "counter", "--input", str(COUNTER_ROWS), "--row", "0", *extra]


async def episode(client: Client, count: int) -> dict:
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(listed) == {"increment_counter", "get_counter_value", "gym_verify"}
    assert listed["increment_counter"].input_schema["required"] == ["count"]
    await client.call_tool("increment_counter", {"count": count})
    value = await client.call_tool("get_counter_value", {})
    assert not value.is_error and str(count) in value.content[0].text
    verdict = await client.call_tool("gym_verify", {"answer": "done"})
    assert not verdict.is_error
    after = await client.call_tool("get_counter_value", {})
    assert after.is_error and "episode is over" in after.content[0].text
    return json.loads(verdict.content[0].text)


@pytest.mark.parametrize(("count", "reward"), [(3, 1.0), (2, 0.0)])
async def test_stdio_episode_is_verified_by_the_environment(tmp_path: Path, count: int, reward: float):
    output = tmp_path / "rollouts.jsonl"
    params = StdioServerParameters(command=sys.executable, args=serve_args("--output", str(output)), cwd=str(ROOT))
    async with Client(params, read_timeout_seconds=60) as client:
        verdict = await episode(client, count)
        # Written as the episode ends, while the client is still there: an MCP client may kill the
        # server soon after it leaves (the SDK's: 2 s after closing its stdin).
        (row,) = [json.loads(line) for line in output.read_text().splitlines()]
    assert verdict["reward"] == reward
    assert (row["reward"], row["verified"], row["expected_count"]) == (reward, True, 3)
    assert [call["name"] for call in row["mcp_tool_calls"]] == ["increment_counter", "get_counter_value"]


async def test_control_routes_are_never_tools_and_unknown_names_reach_nothing(tmp_path: Path):
    # No --input: the counter plugin's own example tasks, row 0 (expected_count 3).
    args = ["-m", "gym_cli", "mcp", "serve", "counter"]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(tmp_path))
    async with Client(params, read_timeout_seconds=60) as client:
        for name in ("seed_session", "verify", "close_session", "no_such_tool"):
            result = await client.call_tool(name, {})
            assert result.is_error and "unknown tool" in result.content[0].text, name
        bad = await client.call_tool("increment_counter", {"count": "three"})
        assert bad.is_error  # the environment's 422 is the client's to see
        verdict = json.loads((await client.call_tool("gym_verify", {"answer": ""})).content[0].text)
    assert (verdict["reward"], verdict["final_count"]) == (0.0, 0)  # row 0 starts at 0; nothing was incremented


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_http_episode(tmp_path: Path):
    port = _free_port()
    output = tmp_path / "rollouts.jsonl"
    args = serve_args("--transport", "http", "--port", str(port), "--output", str(output))
    process = subprocess.Popen([sys.executable, *args], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "gym mcp serve --transport http did not listen"
            time.sleep(0.2)
        async with Client(f"http://127.0.0.1:{port}/mcp", read_timeout_seconds=60) as client:
            verdict = await episode(client, 3)
        assert verdict["reward"] == 1.0
    finally:
        process.send_signal(2)  # Ctrl+C: the command ends the episode and writes its row
        process.wait(30)
    (row,) = [json.loads(line) for line in output.read_text().splitlines()]
    assert row["reward"] == 1.0


async def test_an_environment_failure_ends_the_episode_unscored(tmp_path: Path):
    # Both directions at once: the SDK's client -> gym mcp serve -> mcp_tools -> an SDK server whose
    # tool hangs. The environment's 502 mcp_server_failed is not the client's fault, nor a reward.
    failing = ROOT / "plugins" / "resources" / "mcp_tools" / "tests" / "failing_mcp_server.py"
    config = tmp_path / "env.yaml"
    config.write_text(
        json.dumps(
            {
                "env": {
                    "plugin": "mcp_tools",
                    "command": [sys.executable, str(failing)],
                    "call_timeout_s": 2,
                    "connect_timeout_s": 10,
                }
            }
        )
    )
    output = tmp_path / "rollouts.jsonl"
    task = {"responses_create_params": {"input": "wait"}, "expected_answer": "woke"}
    args = ["-m", "gym_cli", "mcp", "serve", "env", "--config", str(config), "--task", json.dumps(task)]
    params = StdioServerParameters(command=sys.executable, args=[*args, "--output", str(output)], cwd=str(ROOT))
    async with Client(params, read_timeout_seconds=60) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == {
            "hang",
            "die",
            "fail",
            "reject",
            "crash",
            "gym_verify",
        }
        failed = await client.call_tool("hang", {"seconds": 30})
        assert failed.is_error and "mcp_server_failed" in failed.content[0].text
        late = await client.call_tool("gym_verify", {"answer": "woke"})
        assert late.is_error and "episode is over" in late.content[0].text
        (row,) = [json.loads(line) for line in output.read_text().splitlines()]
    assert (row["reward"], row["verified"]) == (None, False)
    assert row["failure"].startswith("mcp_server_failed")


async def test_head_serves_an_instance_of_a_running_run(tmp_path: Path):
    from gym_core.testing import first_party, plugin_manager, running_servers

    config = {"counter": {"plugin": "counter"}}
    with running_servers(config, plugins=plugin_manager(*first_party("counter"))) as global_config:
        head = f"http://127.0.0.1:{global_config.head_port}"
        env = {"GYM_AUTH_TOKEN": global_config.auth_token or ""}
        params = StdioServerParameters(command=sys.executable, args=serve_args("--head", head), cwd=str(ROOT), env=env)
        async with Client(params, read_timeout_seconds=60) as client:
            verdict = await episode(client, 3)
    assert verdict["reward"] == 1.0


async def test_the_tasks_own_tools_are_the_only_ones_offered():
    row = json.loads(COUNTER_ROWS.read_text().splitlines()[0])
    tools = [{"type": "function", "name": "get_counter_value", "parameters": {"type": "object", "properties": {}}}]
    task = {**row, "responses_create_params": {**row["responses_create_params"], "tools": tools}}
    args = ["-m", "gym_cli", "mcp", "serve", "counter", "--task", json.dumps(task)]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT))
    async with Client(params, read_timeout_seconds=60) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == {"get_counter_value", "gym_verify"}
        refused = await client.call_tool("increment_counter", {"count": 3})
        assert refused.is_error and "unknown tool" in refused.content[0].text
        first, second = await asyncio.gather(
            client.call_tool("gym_verify", {"answer": ""}), client.call_tool("gym_verify", {"answer": ""})
        )
        assert sorted([first.is_error, second.is_error]) == [False, True]  # one verdict per episode
