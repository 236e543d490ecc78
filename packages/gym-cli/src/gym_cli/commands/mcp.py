"""``gym mcp serve``: one episode of an environment served as an MCP server, for MCP clients (coding
agents) to act in, verified by gym.

The command seeds one session on the environment with one task, lists the environment's tools for
that task as MCP tools (name, description, input schema), forwards each call to the environment in
that session, and adds one tool of its own, ``gym_verify``: the client's final answer, scored by the
environment's ``/verify``; the verdict is the tool's result and a rollout row (``--output``). After
it the episode is over: the session is closed and further calls are refused. The environment's
control routes (``seed_session``, ``verify``, ``close_session``...) are never tools.

The environment runs in this process (``--config FILE``, or the plugin's defaults when ENV is a
plugin name), or is an instance of a running ``gym run`` (``--head``, or ``--running``: the only run).
The ``mcp`` SDK is the optional extra ``gym-cli[mcp]``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gym_core.errors import GymError

if TYPE_CHECKING:
    from gym_core.client import ServerClient

__all__ = ["mcp", "EpisodeBridge", "VERIFY_TOOL"]

VERIFY_TOOL = "gym_verify"
"""The MCP tool that ends the episode: its argument ``answer`` is the final answer verified."""

_VERIFY_DESCRIPTION = (
    "Submit your final answer and end the episode: the environment verifies it (with what your tool "
    "calls left) and returns the reward. Call it once, last; no tool works after it."
)


def _require_mcp() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise GymError(
            "gym mcp needs the MCP SDK: install gym-cli's extra `mcp` (pip install 'gym-cli[mcp]', or uv add mcp)"
        ) from None


def plugin_example_data(env: str) -> Path | None:
    """The example tasks of the environment plugin ``env`` installed here: ``data/example.jsonl`` of
    its package directory (a source checkout) or of its wheel (``<module>/examples/data/``)."""
    import importlib.util

    from gym_core.plugins import get_plugin_manager

    server_type = get_plugin_manager().servers().get(env)
    if server_type is None or not isinstance(server_type.server, str):
        return None
    spec = importlib.util.find_spec(server_type.server.split(":")[0].split(".")[0])
    if spec is None or spec.origin is None:
        return None
    module = Path(spec.origin).parent
    for candidate in (module / "examples" / "data" / "example.jsonl", module.parents[1] / "data" / "example.jsonl"):
        if candidate.is_file():
            return candidate
    return None


def read_task(input_path: Path | None, row: int, task_json: str | None) -> dict[str, Any]:
    """The task: ``--task JSON``, or row ``row`` (from 0) of the JSONL file ``input_path``."""
    if task_json is not None:
        try:
            task = json.loads(task_json)
        except json.JSONDecodeError as exc:
            raise GymError(f"--task is not JSON: {exc}") from None
        where = "--task"
    elif input_path is not None:
        lines = [line for line in input_path.read_text().splitlines() if line.strip()]
        if not 0 <= row < len(lines):
            raise GymError(f"--row {row}: {input_path} has {len(lines)} rows (numbered from 0)")
        try:
            task = json.loads(lines[row])
        except json.JSONDecodeError as exc:
            raise GymError(f"{input_path}: row {row} is not JSON: {exc}") from None
        where = f"{input_path}: row {row}"
    else:
        raise GymError("say which task: --input FILE (with --row N), or --task JSON (ENV has no example data here)")
    if not isinstance(task, dict) or not isinstance(task.get("responses_create_params"), dict):
        raise GymError(f"{where}: a task is a JSON object with a 'responses_create_params' object")
    return task


def _answer(text: str) -> dict[str, Any]:
    """A Responses object whose output is one assistant message: what ``/verify`` scores."""
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"output": [{"type": "message", "role": "assistant", "status": "completed", "content": content}]}


class EpisodeBridge:
    """One session of an environment, seen as MCP tools: the calls forwarded with the session's
    cookies, ``gym_verify`` scoring the answer once and closing the session."""

    def __init__(
        self,
        client: ServerClient,
        instance: str,
        task: Mapping[str, Any],
        timeout_s: float,
        output: Path | None = None,
    ):
        self.client = client
        self.output = output
        self.started = time.monotonic()
        self.row: dict[str, Any] | None = None
        self.instance = instance
        self.task = dict(task)
        self.timeout_s = timeout_s
        self.cookies: dict[str, str] = {}
        self.tools: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self.verdict: dict[str, Any] | None = None
        self.failure: str | None = None
        self.closed = False  # no more calls
        self.session_closed = False

    async def start(self) -> None:
        """Seed the session; the tools: the task's own (``responses_create_params.tools``) when it
        names them, else the environment's (``GET /tools``), control routes left out."""
        from gym_core.servers import RESERVED_TOOL_NAMES

        await self.client.request(
            "POST", self.instance, "/seed_session", body=self.task, cookies=self.cookies, timeout_s=self.timeout_s
        )
        named = self.task["responses_create_params"].get("tools")
        if named is None:
            named = json.loads(await self.client.request("GET", self.instance, "/tools", timeout_s=self.timeout_s))
        self.tools = [
            tool
            for tool in named
            if isinstance(tool, dict)
            and tool.get("type", "function") == "function"
            and isinstance(tool.get("name"), str)
            and tool["name"] not in RESERVED_TOOL_NAMES
            and tool["name"] != VERIFY_TOOL
        ]

    def mcp_tools(self) -> list[Any]:
        from mcp import types

        tools = [
            types.Tool(
                name=tool["name"],
                description=tool.get("description") or tool["name"],
                input_schema=tool.get("parameters") or {"type": "object", "properties": {}},
            )
            for tool in self.tools
        ]
        verify = {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "your final answer to the task"}},
            "required": ["answer"],
        }
        return [*tools, types.Tool(name=VERIFY_TOOL, description=_VERIFY_DESCRIPTION, input_schema=verify)]

    async def call(self, name: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """The text of a call's result, and whether it is an error the client should see as one."""
        from gym_core.errors import ServerCallError, ServerHTTPError
        from gym_core.failures import ends_rollout

        if self.closed:
            return "the episode is over: no tool works now", True
        if name == VERIFY_TOOL:
            self.closed = True  # from now on: two gym_verify calls at once get one verdict
            return await self.verify(str(arguments.get("answer", ""))), False
        if name not in {tool["name"] for tool in self.tools}:
            offered = ", ".join(sorted(tool["name"] for tool in self.tools)) or "none"
            return f"unknown tool {name!r}: the tools are {offered} and {VERIFY_TOOL}", True
        try:
            raw = await self.client.request(
                "POST",
                self.instance,
                f"/tools/{name}",
                body=dict(arguments),
                cookies=self.cookies,
                timeout_s=self.timeout_s,
            )
        except ServerHTTPError as exc:
            if ends_rollout(exc.status, exc.error_type):
                return await self.fail(f"{exc.reason}: {exc.detail}"), True
            self.calls.append({"name": name, "arguments": dict(arguments), "error": exc.detail})
            return exc.detail, True
        except ServerCallError as exc:  # unreachable, timed out
            return await self.fail(f"{exc.reason}: {exc}"), True
        text = raw.decode()
        self.calls.append({"name": name, "arguments": dict(arguments), "output": text})
        return text, False

    async def fail(self, reason: str) -> str:
        """The environment failed (the failure table's "ends the rollout"), not the client: the
        episode ends unscored, with that reason in its row."""
        self.failure = reason
        await self.close()
        self.finish()
        return f"the environment failed, the episode is over (not scored): {reason}"

    async def verify(self, answer: str) -> str:
        body = {**self.task, "response": _answer(answer)}
        raw = await self.client.request(
            "POST", self.instance, "/verify", body=body, cookies=self.cookies, timeout_s=self.timeout_s
        )
        self.verdict = json.loads(raw)
        await self.close()
        self.finish()
        return json.dumps(self.verdict)

    async def close(self) -> None:
        if self.session_closed:
            return
        self.closed = self.session_closed = True
        with contextlib.suppress(Exception):
            await self.client.request(
                "POST", self.instance, "/close_session", body=b"{}", cookies=self.cookies, timeout_s=10.0
            )

    def finish(self) -> dict[str, Any]:
        """The episode's rollout row, written (to ``output``, summed up on stderr) once: as soon as the
        episode is over, since an MCP client may kill this process soon after it leaves (the SDK's
        stdio client: 2 s after closing stdin)."""
        if self.row is None:
            self.row = self.rollout_row(time.monotonic() - self.started)
            if self.output is not None:
                with self.output.open("a") as sink:
                    sink.write(json.dumps(self.row) + "\n")
            summary = {
                "reward": self.row["reward"],
                "verified": self.row["verified"],
                "tool_calls": len(self.row["mcp_tool_calls"]),
            }
            click.echo(f"gym mcp: episode of {self.instance} ended: {json.dumps(summary)}", err=True)
        return self.row

    def rollout_row(self, answer_time_s: float) -> dict[str, Any]:
        """What the episode gave: the task, the client's tool calls, the verdict (none when it ended
        without ``gym_verify``)."""
        verdict = self.verdict or {}
        return {
            **{k: v for k, v in self.task.items() if k != "conformance"},
            **verdict,
            "reward": verdict.get("reward"),
            "verified": self.verdict is not None,
            "failure": self.failure,
            "environment_instance": self.instance,
            "mcp_tool_calls": self.calls,
            "duration_s": round(answer_time_s, 3),
        }


def _server(bridge: EpisodeBridge, name: str) -> Any:
    from mcp import types
    from mcp.server.lowlevel import Server

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=bridge.mcp_tools())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text, is_error = await bridge.call(params.name, params.arguments or {})
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)

    instructions = "One episode of a gym environment: use its tools, then call gym_verify with your final answer."
    return Server(name, instructions=instructions, on_list_tools=list_tools, on_call_tool=call_tool)


@contextlib.contextmanager
def _in_process(env: str, config_path: Path | None) -> Iterator[tuple[Any, str]]:
    """The environment's servers started in this process (each instance of ``config_path``, or ENV
    alone with its plugin's defaults); yields their config and the instance to talk to."""
    from gym_core.auth import new_token
    from gym_core.config import load_config
    from gym_core.head import build_head_app
    from gym_core.plugins import get_plugin_manager
    from gym_core.serving import ServerThread, build_server

    plugins = get_plugin_manager()
    base: dict[str, Any] = {"auth_token": new_token(), "head_server": {"port": 0}}
    if config_path is None:
        if env not in plugins.servers():
            raise GymError(f"{env!r} is not an installed plugin here: give its config with --config, or use --head")
        base[env] = {"plugin": env}
    global_config = load_config(
        [config_path] if config_path else (),
        base=base,
        env_file=None,
        server_types=plugins.servers(),
        load_errors=plugins.load_errors,
    )
    if env not in global_config.instances:
        raise GymError(f"no instance {env!r} in {config_path}: its instances are {', '.join(global_config.instances)}")
    threads = [ServerThread(build_head_app(global_config), port=global_config.head_port).start()]
    try:
        for name, instance in global_config.instances.items():
            server = build_server(global_config, name, plugins)
            threads.append(ServerThread(server.build_app(), instance.host, instance.port).start())
        yield global_config, env
    finally:
        for thread in reversed(threads):
            thread.stop()


@contextlib.asynccontextmanager
async def _client(env: str, config_path: Path | None, head: str | None, timeout_s: float) -> AsyncIterator[Any]:
    from gym_core.client import ServerClient

    if head is not None:
        from gym_cli.head import connect, find_head

        client = await connect(find_head(head or None), timeout_s)
        try:
            yield client
        finally:
            await client.close()
        return
    with _in_process(env, config_path) as (global_config, _):
        async with ServerClient(global_config) as client:
            yield client


async def serve_episode(
    env: str,
    task: dict[str, Any],
    *,
    config_path: Path | None,
    head: str | None,
    transport: str,
    host: str,
    port: int,
    output: Path | None,
    timeout_s: float,
) -> dict[str, Any]:
    """Serve one episode of ``env`` until the MCP client leaves (stdio) or the server is stopped
    (HTTP, Ctrl+C); its rollout row, also appended to ``output``."""
    async with contextlib.AsyncExitStack() as stack:
        streams = None
        if transport == "stdio":
            from mcp.server.stdio import stdio_server

            # Claimed first: while the SDK holds the process's stdout for the protocol, whatever
            # else prints (a plugin importing, a server starting) goes to stderr.
            streams = await stack.enter_async_context(stdio_server())
        client = await stack.enter_async_context(_client(env, config_path, head, timeout_s))
        bridge = EpisodeBridge(client, env, task, timeout_s, output)
        stack.push_async_callback(bridge.close)
        await bridge.start()
        # However the episode ends (the client left, Ctrl+C), its row is written before the
        # environment stops; an unverified one has reward null. Verified ones were written already.
        stack.callback(bridge.finish)
        server = _server(bridge, f"gym-{env}")
        if streams is not None:
            await server.run(*streams, server.create_initialization_options())
        else:
            import uvicorn

            app = server.streamable_http_app(host=host)
            config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
            click.echo(f"gym mcp: serving {env} at http://{host}:{port}/mcp", err=True)
            await uvicorn.Server(config).serve()
    return bridge.finish()


@click.group()
def mcp() -> None:
    """The Model Context Protocol: gym environments served to MCP clients."""


@mcp.command("serve")
@click.argument("env")
@click.option(
    "--config", "config_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A gym config holding the instance ENV; its instances are started in this process.",
)  # fmt: skip
@click.option("--head", default=None, help="Use ENV of this running run's head server instead (URL).")
@click.option("--running", is_flag=True, help="Use ENV of the only running run (gym run) instead.")
@click.option("--input", "input_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A JSONL file of tasks; --row picks one [default: a plugin ENV's own data/example.jsonl].")  # fmt: skip
@click.option("--row", default=0, show_default=True, help="The task's row in --input, from 0.")
@click.option("--task", "task_json", default=None, help="The task as one JSON object (instead of --input).")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True,
              help="stdio: the MCP client starts this command; http: Streamable HTTP at --host/--port, path /mcp.")  # fmt: skip
@click.option("--host", default="127.0.0.1", show_default=True, help="Address of the http transport.")
@click.option("--port", default=8765, show_default=True, help="Port of the http transport.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Append the episode's rollout row (task, tool calls, verdict) to this JSONL file.")  # fmt: skip
@click.option(
    "--timeout", "timeout_s", default=120.0, show_default=True, help="Seconds each environment call may take."
)
def serve(
    env: str,
    config_path: Path | None,
    head: str | None,
    running: bool,
    input_path: Path | None,
    row: int,
    task_json: str | None,
    transport: str,
    host: str,
    port: int,
    output: Path | None,
    timeout_s: float,
) -> None:
    """Serve one episode of the environment ENV as an MCP server, for an MCP client to act in.

    One session is seeded with the task; the environment's tools for it are MCP tools, each call
    forwarded to the environment in that session; the tool gym_verify takes the client's final
    answer and returns the environment's verdict (the reward), which ends the episode. The rollout
    row (task, tool calls, verdict) is printed to stderr when the client leaves and appended to
    --output. Control routes (seed_session, verify, close_session) are never tools.

    ENV is an instance of --config (every instance of that config starts in this process), a
    plugin name (started with its defaults), or, with --head/--running, an instance of a running
    gym run. Needs the extra gym-cli[mcp].

    \b
    Example:
      gym mcp serve counter --row 2        # the counter's own example task 2, over stdio
      gym mcp serve math --config my.yaml --task '{"responses_create_params": {...}, ...}' --transport http
    """
    import anyio

    _require_mcp()
    if running and head:
        raise GymError("give --head URL or --running, not both")
    if (running or head) and config_path:
        raise GymError("--config starts the environment here; --head/--running use a running one: give one")
    if input_path is None and task_json is None and config_path is None and not (running or head):
        input_path = plugin_example_data(env)  # the plugin's own example tasks
    task = read_task(input_path, row, task_json)
    try:
        anyio.run(
            lambda: serve_episode(
                env,
                task,
                config_path=config_path,
                head=head if head else ("" if running else None),
                transport=transport,
                host=host,
                port=port,
                output=output,
                timeout_s=timeout_s,
            )
        )
    except KeyboardInterrupt:
        pass  # Ctrl+C: how an http episode ends; its row is written
