"""The remote agent over real HTTP, against a small external service started here.

The service is a real aiohttp server on its own port in a thread, outside the gym run (no token, no
gym cookies): it answers ``/v1/responses`` from a script carried in the request's metadata and
records what it received. First gym's conformance kit (counter environment), then every rule:
which calls gym executes, cookies, credentials, failures and their types, timeouts, URL validation.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web

from gym_core import ConfigError, ResourcesServer, Session, ToolError, hookimpl, load_config, tool
from gym_core.config import free_port
from gym_core.schemas import SeedSessionRequest, VerifyRequest, VerifyResponse
from gym_core.testing import AgentServerTests, RunningServers, conformance_reward, conformance_tool_calls

import gym_counter.plugin
import gym_remote.plugin
import gym_scripted.plugin
from gym_remote.config import RemoteConfig, check_service_url
from gym_remote.server import pending_calls

COUNTER_TASKS = Path(__file__).resolve().parents[3] / "resources" / "counter" / "data" / "example.jsonl"
API_KEY = "sk-test-0123456789-secret"


# --- the external service ----------------------------------------------------------------------


class ExternalService:
    """A deterministic Responses-API service: ``metadata["service_turns"]`` (JSON) is its script,
    ``metadata["service_mode"]`` a misbehaviour. Each item it generates has the id ``svc<turn>_<k>``,
    so the turn to play is read off the input (stateless, like the scripted model)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.redirects_followed = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self._sessions = itertools.count(1)
        self._loop = asyncio.new_event_loop()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        assert ready.wait(30), "the external service did not start"

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_route("*", "/elsewhere/v1/responses", self.elsewhere)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.SockSite(runner, self._sock).start())
        ready.set()
        self._loop.run_forever()

    def of_rollout(self, marker: str) -> list[dict[str, Any]]:
        """The requests whose first input item says ``marker`` (one rollout's)."""
        return [r for r in self.requests if json.dumps(r["body"]["input"][:1]).find(marker) >= 0]

    async def elsewhere(self, request: web.Request) -> web.Response:
        self.redirects_followed += 1
        return web.json_response({"error": "a redirect was followed"}, status=418)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"headers": dict(request.headers), "body": body})
        metadata = body.get("metadata") or {}
        mode = metadata.get("service_mode", "script")
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "slow":  # long enough for rollouts sent together to overlap, if allowed to
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            await asyncio.sleep(0.3)
            self.in_flight -= 1
        if mode.startswith("status:"):
            # Echoes the credential it got, as a careless service might: gym must not repeat it.
            return web.Response(status=int(mode[7:]), text=f"no. you sent {request.headers.get('authorization')}")
        if mode == "redirect":
            return web.Response(status=307, headers={"Location": self.url + "/elsewhere/v1/responses"})
        if mode == "not_json":
            return web.Response(text="<html>a proxy error page</html>", content_type="text/html")
        if mode == "not_object":
            return web.json_response([1, 2, 3])
        if mode == "bad_shape":
            return web.json_response({"id": "resp_1", "output": "not a list of items"})
        turns = json.loads(metadata["service_turns"])
        done = [int(i["id"][3:].split("_")[0]) for i in body["input"] if str(i.get("id", "")).startswith("svc")]
        turn_index = max(done) + 1 if done else 0
        turn = turns[turn_index] if turn_index < len(turns) else [{"say": "out of script"}]
        items, incomplete = (turn["items"], turn.get("incomplete")) if isinstance(turn, dict) else (turn, None)
        output = [self._item(spec, f"svc{turn_index}_{k}") for k, spec in enumerate(items)]
        answer = {
            "id": f"resp_{turn_index}",
            "object": "response",
            "created_at": 1,
            "model": "external-agent-1",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "incomplete_details": {"reason": incomplete} if incomplete else None,
        }
        if mode != "no_usage":
            answer["usage"] = {"input_tokens": 10 + turn_index, "output_tokens": 2, "total_tokens": 12 + turn_index}
        response = web.json_response(answer)
        if "svc_session" not in request.cookies:
            response.set_cookie("svc_session", f"s{next(self._sessions)}")
        return response

    @staticmethod
    def _item(spec: dict[str, Any], item_id: str) -> dict[str, Any]:
        if "call" in spec:
            arguments = spec["raw"] if "raw" in spec else json.dumps(spec.get("args", {}))
            return {
                "type": "function_call",
                "id": item_id,
                "call_id": spec.get("call_id", item_id),
                "name": spec["call"],
                "arguments": arguments,
            }
        if "output_for" in spec:
            return {
                "type": "function_call_output",
                "id": item_id,
                "call_id": spec["output_for"],
                "output": spec["text"],
            }
        if "reasoning" in spec:
            return {
                "type": "reasoning",
                "id": item_id,
                "summary": [{"type": "summary_text", "text": spec["reasoning"]}],
            }
        return {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": spec["say"], "annotations": []}],
        }


SERVICE: ExternalService | None = None


def service() -> ExternalService:
    global SERVICE
    if SERVICE is None:
        SERVICE = ExternalService()
    return SERVICE


# --- a tiny environment ------------------------------------------------------------------------


class NotesSeed(SeedSessionRequest, kw_only=True):
    reward: Any = None
    response: Any = None
    error: Any = None
    failure_class: Any = msgspec.field(default=None, name="_ng_failure_class")


class NotesVerdict(VerifyResponse, kw_only=True):
    notes: list[str]


class Notes(ResourcesServer):
    """One point per note written in the session; remembers what it was seeded with and verified."""

    reward_range = (0.0, float("inf"))

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.stale_keys_seeded: list[str] = []
        self.verifications = 0

    async def seed_session(self, session: Session, body: NotesSeed) -> Any:
        self.stale_keys_seeded += [
            k for k in ("reward", "response", "error", "failure_class") if getattr(body, k) is not None
        ]
        self.sessions.get_or_create(session.id, list)

    @tool
    async def write(self, session: Session, text: str) -> dict:
        """Append a note."""
        notes = self.existing_session_state(session)
        notes.append(text)
        return {"notes": len(notes)}

    @tool
    async def fail(self) -> dict:
        """Always refuses."""
        raise ToolError("this tool always fails")

    @tool
    async def crash(self) -> dict:
        """A bug in the environment: a 500."""
        raise RuntimeError("environment bug")

    async def verify(self, session: Session, body: VerifyRequest) -> NotesVerdict:
        self.verifications += 1
        notes = self.existing_session_state(session)
        return NotesVerdict(reward=float(len(notes)), notes=list(notes))


class HelperServers:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="notes", kind="resources", server=Notes)


def notes_agent(**options: Any) -> dict[str, Any]:
    return {"plugin": "remote", "agent_base_url": service().url, "resources_server": "notes", **options}


def task(turns: list[Any] | None = None, marker: str = "take notes", mode: str | None = None, **fields: Any) -> dict:
    metadata = {"service_turns": json.dumps(turns or [[{"say": "done"}]])}
    if mode:
        metadata["service_mode"] = mode
    return {"responses_create_params": {"input": marker, "metadata": metadata}, **fields}


# --- the conformance kit, then the rules -------------------------------------------------------


class TestRemoteAgent(AgentServerTests):
    instance = "remote"
    plugins = [gym_remote.plugin, gym_counter.plugin, gym_scripted.plugin, HelperServers()]
    example_data = COUNTER_TASKS
    run_model_port = free_port()

    @classmethod
    def instances_config(cls) -> dict[str, Any]:
        url = service().url
        return {
            "environment": {"plugin": "counter"},
            "remote": {"plugin": "remote", "agent_base_url": url + "/", "resources_server": "environment"},
            "notes": {"plugin": "notes"},
            "notes_agent": notes_agent(),
            "two_steps": notes_agent(max_steps=2),
            "one_slot": notes_agent(concurrency=1),
            "keyed": notes_agent(api_key=API_KEY, model="a-model-of-mine"),
            "hasty": notes_agent(remote_responses_timeout_secs=0.5),
            "short_run": notes_agent(run_timeout_secs=1.0),
            "unreachable": notes_agent(agent_base_url=f"http://127.0.0.1:{free_port()}"),
            # One of the run's own servers addressed by URL (as the local config does with local_llama).
            "policy": {"plugin": "scripted", "port": cls.run_model_port},
            "via_run_model": {
                "plugin": "remote",
                "agent_base_url": f"http://127.0.0.1:{cls.run_model_port}",
                "resources_server": "environment",
            },
        }

    # The rollout contract's probe model, reached by URL as the service.
    @classmethod
    def probe_config(cls) -> dict[str, Any]:
        config = super().probe_config()
        config["remote"]["agent_base_url"] = f"http://127.0.0.1:{config['probe_model']['port']}"
        return config

    # The kit's rows: the service makes the row's conformance tool calls, then says it is done.
    def run_body(self, row):
        calls = [{"call": name, "args": arguments} for name, arguments in conformance_tool_calls(row)]
        assert calls, "each counter example row has conformance tool calls"
        params = {
            **row["responses_create_params"],
            "metadata": {"service_turns": json.dumps([calls, [{"say": "done"}]])},
        }
        return {**row, "responses_create_params": params}

    def expected_reward(self, row):
        return conformance_reward(row)

    def run(self, servers: RunningServers, agent: str, body: dict) -> Any:
        return servers.caller(agent).post("/run", body)

    def test_unpaired_calls_are_executed_and_paired_ones_passed_through(self, gym_servers):
        turns = [
            [
                {"call": "write", "args": {"text": "by gym"}, "call_id": "c1"},
                {"call": "write", "args": {"text": "by the service"}, "call_id": "c2"},
                {"output_for": "c2", "text": "the service ran it itself"},
            ],
            [{"say": "done"}],
        ]
        result = self.run(gym_servers, "notes_agent", task(turns, marker="paired-calls")).json()
        assert (result["reward"], result["notes"]) == (1.0, ["by gym"])
        output = result["response"]["output"]
        assert [(i["type"], i.get("call_id")) for i in output] == [
            ("function_call", "c1"),
            ("function_call", "c2"),
            ("function_call_output", "c2"),
            ("function_call_output", "c1"),
            ("message", None),
        ]
        assert json.loads(output[3]["output"]) == {"notes": 1}
        second = service().of_rollout("paired-calls")[1]["body"]["input"]
        assert [i.get("type") for i in second[1:]] == ["function_call"] * 2 + ["function_call_output"] * 2
        assert (result["num_model_calls"], result["num_tool_calls"]) == (2, 1)

    def test_a_duplicate_call_id_executes_once_with_the_last_arguments(self, gym_servers):
        turns = [
            [
                {"call": "write", "args": {"text": "first"}, "call_id": "c1"},
                {"call": "write", "args": {"text": "last"}, "call_id": "c1"},
            ],
            [{"say": "done"}],
        ]
        result = self.run(gym_servers, "notes_agent", task(turns)).json()
        assert result["notes"] == ["last"] and result["num_tool_calls"] == 1

    def test_malformed_arguments_and_unoffered_tools_are_outputs_not_calls(self, gym_servers):
        turns = [
            [
                {"call": "write", "raw": "{", "call_id": "c1"},
                {"call": "seed_session", "args": {}, "call_id": "c2"},
                {"call": "fail", "call_id": "c3"},
            ],
            [{"say": "done"}],
        ]
        result = self.run(gym_servers, "notes_agent", task(turns)).json()
        outputs = {
            i["call_id"]: json.loads(i["output"])
            for i in result["response"]["output"]
            if i["type"] == "function_call_output"
        }
        assert outputs["c1"]["error"].startswith("Invalid tool call arguments: JSONDecodeError(")
        assert outputs["c2"]["error"].startswith(
            "unknown tool 'seed_session': the tools offered are crash, fail, write"
        )
        assert outputs["c3"] == {"error": "this tool always fails"}  # a refusal the environment meant
        assert result["reward"] == 0.0

    def test_the_loop_stops_on_incomplete_details_and_continues_after_reasoning_only(self, gym_servers):
        cut = [{"items": [{"call": "write", "args": {"text": "never"}}], "incomplete": "max_output_tokens"}]
        result = self.run(gym_servers, "notes_agent", task(cut)).json()
        assert (result["reward"], result["num_model_calls"], result["num_tool_calls"]) == (0.0, 1, 0)
        thinking = [[{"reasoning": "hmm"}], [{"call": "write", "args": {"text": "x"}}], [{"say": "done"}]]
        result = self.run(gym_servers, "notes_agent", task(thinking)).json()
        assert (result["reward"], result["num_model_calls"]) == (1.0, 3)

    def test_max_steps_bounds_the_service_calls(self, gym_servers):
        every_turn = [[{"call": "write", "args": {"text": str(i)}}] for i in range(5)]
        result = self.run(gym_servers, "two_steps", task(every_turn, marker="two-steps")).json()
        assert (result["reward"], result["num_model_calls"]) == (2.0, 2)
        assert len(service().of_rollout("two-steps")) == 2

    def test_the_record_says_what_produced_the_rollout_and_what_it_cost(self, gym_servers):
        turns = [[{"call": "write", "args": {"text": "a"}}], [{"say": "done"}]]
        result = self.run(gym_servers, "notes_agent", task(turns)).json()
        assert {
            k: result[k]
            for k in (
                "agent",
                "model_server",
                "model",
                "environment",
                "resources_server",
                "num_model_calls",
                "num_tool_calls",
            )
        } == {
            "agent": "notes_agent",
            "model_server": service().url,
            "model": "external-agent-1",
            "environment": "notes",
            "resources_server": "notes",
            "num_model_calls": 2,
            "num_tool_calls": 1,
        }
        assert [u["input_tokens"] for u in result["usage_per_turn"]] == [10, 11]
        assert result["usage"]["total_tokens"] == result["response"]["usage"]["total_tokens"] == 12 + 13

    def test_service_cookies_are_per_rollout_and_kept_private(self, gym_servers):
        turns = [[{"call": "write", "args": {"text": "a"}}], [{"say": "done"}]]
        first = self.run(gym_servers, "notes_agent", task(turns, marker="cookies-one"))
        self.run(gym_servers, "notes_agent", task(turns, marker="cookies-two"))
        one, two = service().of_rollout("cookies-one"), service().of_rollout("cookies-two")
        assert "cookie" not in {k.lower() for k in one[0]["headers"]}
        assert one[1]["headers"]["Cookie"].startswith("svc_session=s")
        assert "cookie" not in {k.lower() for k in two[0]["headers"]}  # a new rollout, a new session
        assert one[1]["headers"]["Cookie"] != two[1]["headers"]["Cookie"]
        assert "svc_session" not in first.text and "svc_session" not in json.dumps(first.json())

    def test_the_service_never_gets_the_run_token_gym_cookies_or_the_row(self, gym_servers):
        row = task(
            [[{"call": "write", "args": {"text": "a"}}], [{"say": "done"}]],
            marker="private-row",
            verifier_metadata={"answer": "the-hidden-answer"},
        )
        assert self.run(gym_servers, "notes_agent", row).json()["reward"] == 1.0
        for request in service().of_rollout("private-row"):
            headers = {k.lower(): v for k, v in request["headers"].items()}
            assert "authorization" not in headers, headers
            assert "gym_session" not in headers.get("cookie", "")
            assert gym_servers.config.auth_token not in json.dumps(request)
            assert "the-hidden-answer" not in json.dumps(request["body"])
            assert set(request["body"]) <= {"input", "metadata", "tools", "model"}

    def test_the_services_own_key_is_sent_and_redacted_from_errors_and_logs(self, gym_servers, caplog):
        ok = self.run(gym_servers, "keyed", task(marker="keyed-ok"))
        assert ok.json()["reward"] == 0.0
        request = service().of_rollout("keyed-ok")[0]
        assert request["headers"]["Authorization"] == f"Bearer {API_KEY}"
        assert request["body"]["model"] == "a-model-of-mine"  # the option, as the row names no model
        refused = self.run(gym_servers, "keyed", task(mode="status:401"))
        assert refused.status == 424 and refused.json()["error"]["type"] == "remote_refused", refused.text
        assert "HTTP 401: no. you sent Bearer ***" in refused.text
        assert API_KEY not in refused.text and API_KEY not in caplog.text

    @pytest.mark.parametrize(
        ("mode", "status", "kind"),
        [
            ("status:500", 502, "remote_server_error"),
            ("status:503", 502, "remote_server_error"),
            ("status:429", 502, "remote_server_error"),
            ("status:400", 424, "remote_refused"),
            ("status:404", 424, "remote_refused"),
            ("redirect", 424, "remote_redirect"),
            ("not_json", 424, "remote_invalid_json"),
            ("not_object", 424, "remote_invalid_json"),
            ("bad_shape", 424, "RemoteAgentTerminalError"),
        ],
    )
    def test_a_failing_service_fails_the_rollout_with_a_typed_reason(self, gym_servers, mode, status, kind):
        notes = gym_servers.servers["notes"]
        verified = notes.verifications
        reply = self.run(gym_servers, "notes_agent", task(mode=mode))
        assert reply.status == status, reply.text
        error = reply.json()["error"]
        assert error["type"] == kind and error["message"].startswith("remote service /v1/responses:"), error
        assert service().url not in reply.text  # errors never name the service by its URL
        assert notes.verifications == verified  # no verdict for a rollout that failed
        assert len(notes.sessions) == 0  # closed, failed or not
        if mode == "redirect":
            assert service().redirects_followed == 0

    def test_an_unreachable_service_fails_after_three_tries(self, gym_servers):
        reply = self.run(gym_servers, "unreachable", task())
        assert reply.status == 502, reply.text
        error = reply.json()["error"]
        assert error["type"] == "remote_unreachable"
        assert (
            "could not reach the remote service after 3 tries" in error["message"]
            and "127.0.0.1" not in error["message"]
        )
        assert len(gym_servers.servers["notes"].sessions) == 0

    @pytest.mark.timeout(60)
    def test_a_hung_service_ends_in_a_typed_timeout(self, gym_servers):
        reply = self.run(gym_servers, "hasty", task(mode="hang"))
        assert reply.status == 504, reply.text
        error = reply.json()["error"]
        assert error["type"] == "remote_timeout" and "remote_responses_timeout_secs" in error["message"], error
        assert len(gym_servers.servers["notes"].sessions) == 0

    @pytest.mark.timeout(60)
    def test_a_rollout_past_run_timeout_secs_ends_in_a_typed_timeout(self, gym_servers):
        reply = self.run(gym_servers, "short_run", task(mode="hang"))
        assert reply.status == 504, reply.text
        error = reply.json()["error"]
        assert error["type"] == "run_timeout" and "run_timeout_secs" in error["message"], error
        assert len(gym_servers.servers["notes"].sessions) == 0

    def test_stale_result_fields_of_a_refed_row_are_dropped(self, gym_servers):
        notes = gym_servers.servers["notes"]
        before = len(notes.stale_keys_seeded)
        row = task(
            reward=1.0,
            response={"output": []},
            error="old failure",
            _ng_failure_class="remote_agent_error",
            _ng_failure_terminal=True,
        )
        result = self.run(gym_servers, "notes_agent", row).json()
        assert notes.stale_keys_seeded[before:] == []
        assert result["reward"] == 0.0 and "error" not in result and "_ng_failure_class" not in result

    def test_concurrency_bounds_the_rollouts_in_flight(self, gym_servers):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(lambda _: self.run(gym_servers, "one_slot", task(mode="slow")), range(4)))
        assert [r.status for r in replies] == [200] * 4
        assert service().most_in_flight == 1

    def test_a_skills_ref_is_warned_about_and_the_rollout_runs(self, gym_servers, caplog):
        result = self.run(gym_servers, "notes_agent", task(skills_ref="skills/v1"))
        assert result.status == 200, result.text
        assert "skills_ref cannot be staged into a remote service" in caplog.text

    def test_one_of_the_runs_own_servers_can_be_the_service(self, gym_servers):
        """The scripted model of this run, addressed by URL: being a server of the run, it gets the
        run's token (as gym's client gives it), and plays the counter task."""
        row = json.loads(COUNTER_TASKS.read_text().splitlines()[0])
        calls = [{"name": name, "arguments": arguments} for name, arguments in conformance_tool_calls(row)]
        script = json.dumps([{"tool_calls": calls}, {"text": "done"}])
        body = {
            **row,
            "responses_create_params": {**row["responses_create_params"], "metadata": {"scripted_turns": script}},
        }
        result = self.run(gym_servers, "via_run_model", body)
        assert result.status == 200 and result.json()["reward"] == conformance_reward(row), result.text

    def test_v1_responses_runs_the_loop_in_a_fresh_session_and_closes_it(self, gym_servers):
        turns = [[{"call": "write", "args": {"text": "a"}}], [{"say": "done"}]]
        reply = gym_servers.caller("notes_agent").post("/v1/responses", task(turns)["responses_create_params"])
        assert [i["type"] for i in reply.json()["output"]] == ["function_call", "function_call_output", "message"]
        assert json.loads(reply.json()["output"][1]["output"]) == {"notes": 1}
        assert len(gym_servers.servers["notes"].sessions) == 0


def test_pending_calls_are_the_unanswered_ones_in_order():
    from gym_core.schemas import FunctionCall, FunctionCallOutput, Message

    def call(call_id, arguments="{}"):
        return FunctionCall(call_id=call_id, name="t", arguments=arguments)

    output = [
        call("a"),
        call("b"),
        FunctionCallOutput(call_id="b", output="x"),
        call("c", "1"),
        Message(role="assistant", content="hi"),
        call("c", "2"),
        call("b"),
    ]
    assert [(c.call_id, c.arguments) for c in pending_calls(output)] == [("a", "{}"), ("c", "2")]


# --- options -----------------------------------------------------------------------------------


def load(**options: Any):
    servers = TestRemoteAgent.plugin_manager().servers()
    config = {"agent": {"plugin": "remote", "resources_server": "env", **options}, "env": {"plugin": "notes"}}
    return load_config(base=config, env_file=None, server_types=servers)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("https://agents.example.com/", "https://agents.example.com"),
        ("https://agents.example.com/team/agent-7//", "https://agents.example.com/team/agent-7"),
        ("http://[::1]:9000/", "http://[::1]:9000"),
    ],
)
def test_accepted_service_urls_lose_their_trailing_slash(url, expected):
    assert check_service_url(url) == expected
    load(agent_base_url=url)  # the config loads
    options = {"agent_base_url": url, "resources_server": "env"}
    assert msgspec.convert(options, RemoteConfig).agent_base_url == expected  # what the server reads


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("", "non-empty URL"),
        ("agents.example.com/v1", "absolute http:// or https:// URL"),
        ("/v1", "absolute http:// or https:// URL"),
        ("ftp://agents.example.com", "absolute http:// or https:// URL"),
        ("file:///etc/passwd", "absolute http:// or https:// URL"),
        ("javascript:alert(1)", "absolute http:// or https:// URL"),
        ("https://", "has no host"),
        ("https://user:hunter2-secret@agents.example.com", "must not embed credentials"),
        ("https://hunter2-secret@agents.example.com", "must not embed credentials"),
        ("https://agents.example.com/?key=hunter2-secret", "must not carry a query string"),
        ("https://agents.example.com/v1?", "must not carry a query string"),
        ("https://agents.example.com/#hunter2-secret", "must not carry a fragment"),
        ("https://agents.example.com/v1;key=hunter2-secret", "must not carry ;params"),
        ("https://agents.example.com:99999", "not a valid URL"),
        ("https://agents.example.com:0", "port 0"),
        ("https://agents.example.com/a b", "without whitespace"),
        ("https://agents.example.com/\nhunter2-secret", "without whitespace"),
    ],
)
def test_refused_service_urls_are_config_errors_that_never_echo_the_url(url, why):
    with pytest.raises(ConfigError) as error:
        load(agent_base_url=url)
    message = str(error.value)
    assert "agent_base_url" in message and why in message, message
    assert "hunter2" not in message and "agents.example.com" not in message


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("remote_responses_timeout_secs", 0),
        ("remote_responses_timeout_secs", -1),
        ("remote_responses_timeout_secs", float("inf")),
        ("remote_responses_timeout_secs", 86_401),
        ("run_timeout_secs", 0),
        ("run_timeout_secs", float("inf")),
        ("connect_timeout_secs", 0),
        ("concurrency", 0),
        ("max_steps", -1),
    ],
)
def test_every_wait_is_bounded_and_limits_make_sense(option, value):
    with pytest.raises(ConfigError) as error:
        load(agent_base_url="http://127.0.0.1:8000", **{option: value})
    assert f"agent.{option}" in str(error.value)


def test_the_service_key_is_redacted_from_the_published_config():
    config = load(agent_base_url="http://127.0.0.1:8000", api_key=API_KEY)
    assert API_KEY not in json.dumps(config.redacted())
