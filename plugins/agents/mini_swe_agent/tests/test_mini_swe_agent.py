"""mini-swe-agent (the PyPI package, unmodified) as a gym rollout, real servers on loopback: the repo
environment's sandbox runs its commands, a scripted model that also returns token ids (bytes of a
chat template: exact, recomputable here) plays the policy through the capturing proxy.

The conformance kit for agents, then what is particular to this one: the captured ids equal the
model server's, the chained trajectory and its mask, gym-train's sample, a hanging or failing
harness or model as a typed failure.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from gym_core import hookimpl, load_config
from gym_core.schemas import Message, Response, ResponseCreateParams, message_text
from gym_core.testing import (
    AgentServerTests,
    HTTPCaller,
    RunningServers,
    plugin_manager,
    read_rows,
    running_servers,
    wait_until,
)

import gym_mini_swe_agent.plugin
import gym_repo.plugin
import gym_scripted.plugin
from gym_mini_swe_agent.capture import Call, chain
from gym_scripted.config import ScriptedModelConfig
from gym_scripted.server import ScriptedModel


def shipped(module: ModuleType, kind: str, name: str) -> Path:
    """A plugin's example file ``kind/name`` (``data``, ``configs``): in its source tree (the
    workspace's editable install) or in its installed wheel's ``examples/`` (a plugin's own venv)."""
    package = Path(module.__file__ or "").resolve().parent
    candidates = [package.parents[1] / kind / name, package / "examples" / kind / name]
    found = next((path for path in candidates if path.is_file()), None)
    assert found is not None, f"{module.__name__} ships no {kind}/{name}: looked at {', '.join(map(str, candidates))}"
    return found


EXAMPLE_DATA = shipped(gym_repo.plugin, "data", "example.jsonl")
ROWS = read_rows(EXAMPLE_DATA)
SUBMIT = "I am done.\n```mswea_bash_command\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"


def render(messages: list[Any]) -> str:
    """The test model's chat template (its prompt, as text)."""
    text = "".join(f"<{m.role}>{message_text(m)}</{m.role}>" for m in messages if isinstance(m, Message))
    return text + "<assistant>"


def tokens(text: str) -> list[int]:
    return list(text.encode())


def log_probs(ids: list[int]) -> list[float]:
    return [-(i % 7) / 8 for i in ids]


class TokenScripted(ScriptedModel):
    """The scripted model, with token ids: the UTF-8 bytes of :func:`render` and of the reply (+ its
    end tag), log-probs a function of each id; on the last output message, as local_llama puts them."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.carried: list[int] = []  # per request: the assistant items that came back with their token ids

    async def responses(self, params: ResponseCreateParams) -> Response:
        if not isinstance(params.input, str):
            self.carried.append(
                sum(1 for m in params.input if isinstance(m, Message) and m.generation_token_ids is not None)
            )
        response = await super().responses(params)
        if params.return_token_ids:
            said = [m for m in response.output if isinstance(m, Message)]
            if said:
                generated = tokens("".join(message_text(m) for m in said) + "</assistant>")
                inputs = [params.input] if isinstance(params.input, str) else params.input
                said[-1].prompt_token_ids = tokens(render(list(inputs)))
                said[-1].generation_token_ids = generated
                said[-1].generation_log_probs = log_probs(generated)
        return response


class Helpers:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="token_scripted", kind="model", server=TokenScripted, config=ScriptedModelConfig)


def with_script(row: dict[str, Any], *texts: str) -> dict[str, Any]:
    script = [{"text": text} for text in texts]
    params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
    return {**row, "responses_create_params": params}


def fix_turn(row: dict[str, Any]) -> str:
    return (
        f"THOUGHT: apply the fix.\n```mswea_bash_command\npatch -p1 <<'GYM_EOF'\n{row['reference_patch']}GYM_EOF\n```"
    )


class TestMiniSweAgent(AgentServerTests):
    server_type = "mini_swe_agent"
    plugins = [gym_mini_swe_agent.plugin, gym_repo.plugin, gym_scripted.plugin, Helpers()]
    model = {"plugin": "token_scripted"}
    environment = {"plugin": "repo", "command_timeout_s": 5}
    options = {"step_limit": 4, "harness_timeout_s": 60}
    probe_options = {"require_token_ids": False}
    example_data = EXAMPLE_DATA

    def run_body(self, row):
        if row["conformance"]["reward"] == 1.0:
            return with_script(row, fix_turn(row), SUBMIT)
        return with_script(row, SUBMIT)

    def expected_reward(self, row):
        return row["conformance"]["reward"]

    def test_the_captured_ids_are_the_model_servers(self, gym_servers: RunningServers):
        row = ROWS[0]
        body = with_script(row, "THOUGHT: look.\n```mswea_bash_command\nls\n```", fix_turn(row), SUBMIT)
        model = gym_servers.servers["policy"]
        assert isinstance(model, TokenScripted)
        model.carried.clear()
        result = gym_servers.caller().post("/run", body).json()
        assert result["reward"] == 1.0 and result["submitted"] is True and result["exit_status"] == "Submitted"
        # The harness sends its replies back as text; the proxy sends the items they came from, ids included.
        assert model.carried == [0, 1, 2]
        assert result["steps"] == 3 and result["num_model_calls"] == 3 and result["num_tool_calls"] == 3
        said = [m for m in result["response"]["output"] if m.get("role") == "assistant"]
        assert len(said) == len(result["calls"]) == 3
        for call, item in zip(result["calls"], said):
            # Each call's prompt is the model server's tokenisation of what the harness sent...
            assert call == {k: item[k] for k in ("prompt_token_ids", "generation_token_ids", "generation_log_probs")}
            text = bytes(call["prompt_token_ids"]).decode()
            assert text.startswith("<system>You are a helpful assistant") and text.endswith("<assistant>")
            reply = item["content"][0]["text"]
            assert call["generation_token_ids"] == tokens(reply + "</assistant>")
            assert call["generation_log_probs"] == log_probs(call["generation_token_ids"])
        # ...the harness's own observation template between the calls (the sandbox's output of `ls`).
        second = bytes(result["calls"][1]["prompt_token_ids"]).decode()
        assert "<returncode>0</returncode>" in second and "README.md" in second
        # The chained trajectory: one sequence, the generated ids masked 1, the rest 0.
        trajectory = result["trajectory"]
        assert result["token_drift"] == 0 and trajectory["segments"] == 1
        last = result["calls"][-1]
        assert trajectory["token_ids"] == last["prompt_token_ids"] + last["generation_token_ids"]
        generated = [t for t, m in zip(trajectory["token_ids"], trajectory["loss_mask"]) if m]
        assert generated == sum((c["generation_token_ids"] for c in result["calls"]), [])
        assert [p for p, m in zip(trajectory["log_probs"], trajectory["loss_mask"]) if m] == sum(
            (c["generation_log_probs"] for c in result["calls"]), []
        )

    def test_gym_train_takes_the_row_unchanged(self, gym_servers: RunningServers):
        row = ROWS[0]
        result = gym_servers.caller().post("/run", with_script(row, fix_turn(row), SUBMIT)).json()
        # gym-train's sample is the last output item carrying generation ids (gym_train.loop.rollout_sample):
        carrier = [m for m in result["response"]["output"] if m.get("generation_token_ids") is not None][-1]
        assert {k: carrier[k] for k in result["calls"][-1]} == result["calls"][-1]
        try:  # gym-train lives in its own venv (torch); where it is importable, its own reader too
            from gym_train.loop import rollout_sample
        except ImportError:
            return
        sample = rollout_sample(result, group=0)
        assert sample is not None and sample["reward"] == 1.0
        assert sample["generation_token_ids"] == result["calls"][-1]["generation_token_ids"]

    def test_format_errors_are_reminders_and_their_replies_stay_in_the_trajectory(self, gym_servers: RunningServers):
        row = ROWS[0]
        # The harness keeps no reply that broke the format, so the script's turn 0 comes back each time.
        result = gym_servers.caller().post("/run", with_script(row, "no command here")).json()
        assert result["exit_status"] == "RepeatedFormatError" and result["submitted"] is False
        assert result["reward"] == 0.0 and len(result["calls"]) == 3 and result["num_tool_calls"] == 0
        output = result["response"]["output"]
        assert [m["role"] for m in output] == ["assistant", "user"] * 3
        assert all(m["generation_token_ids"] == c["generation_token_ids"] for m, c in zip(output[::2], result["calls"]))
        assert "EXACTLY ONE action" in output[1]["content"]

    def test_the_harness_commands_run_in_the_sandbox(self, gym_servers: RunningServers):
        row = ROWS[0]
        probe = "THOUGHT: where am I.\n```mswea_bash_command\npwd; id -u; ls /root 2>&1 | head -1\n```"
        result = gym_servers.caller().post("/run", with_script(row, probe, SUBMIT)).json()
        observation = result["response"]["output"][1]["content"]
        assert "/tmp/work" in observation and "65534" in observation  # the sandbox's workspace, uid nobody

    def test_the_proxy_answers_only_a_live_rollouts_key_on_loopback(self, gym_servers: RunningServers):
        import urllib.error
        import urllib.request

        proxy = gym_servers.server._proxy  # type: ignore[attr-defined]
        assert proxy.base_url.startswith("http://127.0.0.1:")
        body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
        for headers, status in (({"authorization": "Bearer not-a-key"}, 401), ({}, 401)):
            request = urllib.request.Request(proxy.base_url + "/chat/completions", body, headers, method="POST")
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(request, timeout=10)
            assert caught.value.code == status and json.loads(caught.value.read())["error"]["status"] == status


class TestFailures:
    """A harness that hangs, a model that fails: typed failures, never a reward."""

    @staticmethod
    @contextlib.contextmanager
    def agent(options: dict[str, Any], model: dict[str, Any] | None = None) -> Iterator[HTTPCaller]:
        config = {
            "policy": {"plugin": "token_scripted", **(model or {})},
            "environment": {"plugin": "repo", "command_timeout_s": 20},
            "agent": {
                "plugin": "mini_swe_agent",
                "model_server": "policy",
                "resources_server": "environment",
                **options,
            },
        }
        manager = plugin_manager(gym_mini_swe_agent.plugin, gym_repo.plugin, gym_scripted.plugin, Helpers())
        with running_servers(config, manager) as resolved:
            yield HTTPCaller(resolved.instances["agent"].url, auth_token=resolved.auth_token)

    # The harness thread outlives the server here; when it ends, it must not raise into the closed loop.
    @pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
    def test_a_harness_past_its_deadline_fails_the_rollout_typed(self):
        row = ROWS[0]
        slow = "THOUGHT: wait.\n```mswea_bash_command\nsleep 4\n```"
        with self.agent({"harness_timeout_s": 1.5}) as caller:
            answer = caller.post("/run", with_script(row, slow, SUBMIT))
            assert answer.status == 504, answer.text
            assert answer.json()["error"]["type"] == "harness_timeout"
        wait_until(
            lambda: not any(t.name == "gym-mini-swe-agent" for t in threading.enumerate()),
            "the harness thread ending after the server stopped",
            timeout_s=60,
        )

    def test_a_harness_that_raises_fails_the_rollout_typed(self, tmp_path: Path):
        broken = tmp_path / "broken.yaml"  # a template naming a variable the harness does not have
        broken.write_text("agent:\n  system_template: '{{ no_such_variable }}'\n  instance_template: '{{task}}'\n")
        with self.agent({"harness_config": str(broken)}) as caller:
            answer = caller.post("/run", with_script(ROWS[0], SUBMIT))
            assert answer.status == 502 and answer.json()["error"]["type"] == "harness_failed", answer.text
            assert "no_such_variable" in answer.text

    def test_a_failing_model_fails_the_rollout_with_its_own_type(self):
        row = ROWS[0]
        with self.agent({}, {"rules": [{"match": "helpful assistant", "error_status": 503}]}) as caller:
            answer = caller.post("/run", with_script(row, SUBMIT))
            assert answer.status >= 500 and "reward" not in answer.json(), answer.text

    def test_a_model_without_token_ids_fails_when_they_are_required(self):
        row = ROWS[0]
        with self.agent({}, {"plugin": "scripted"}) as caller:
            answer = caller.post("/run", with_script(row, SUBMIT))
            assert answer.status == 424 and "no token ids" in answer.text


def call(prompt: list[int], generated: list[int]) -> Call:
    return Call(Response(output=[]), prompt, generated, [-1.0] * len(generated))


def test_chain_masks_what_the_model_generated_and_counts_drift():
    whole = chain([call([1, 2], [3]), call([1, 2, 3, 4], [5, 6])])
    assert whole["token_ids"] == [1, 2, 3, 4, 5, 6] and whole["loss_mask"] == [0, 0, 1, 0, 1, 1]
    assert whole["log_probs"] == [0.0, 0.0, -1.0, 0.0, -1.0, -1.0] and whole["segments"] == 1
    drifted = chain([call([1, 2], [3]), call([1, 9, 3, 4], [5])])
    assert drifted["token_drift"] == 1 and drifted["segments"] == 2
    assert drifted["token_ids"] == [1, 9, 3, 4, 5] and drifted["loss_mask"] == [0, 0, 0, 0, 1]


@pytest.mark.parametrize("missing", ["prompt", "generated"])
def test_chain_skips_calls_without_ids(missing):
    partial = Call(
        Response(output=[]), None if missing == "prompt" else [1], None if missing == "generated" else [2], None
    )
    assert chain([partial])["turns"] == [{"prompt_tokens": None, "generation_tokens": None, "drifted_tokens": 0}]


def test_the_example_config_is_valid():
    local_llama = pytest.importorskip("gym_local_llama.plugin")
    manager = plugin_manager(gym_mini_swe_agent.plugin, gym_repo.plugin, local_llama)
    config = load_config(
        [shipped(gym_mini_swe_agent.plugin, "configs", "mini_swe_agent.yaml")],
        env_file=None,
        server_types=manager.servers(),
        allocate_ports=False,
    )
    assert config.instances["mini_swe_agent"].plugin == "mini_swe_agent"
