"""The token_preserving agent over real HTTP: gym's conformance kit (scripted model, counter
environment), its loop rules against a model defined here that hands out token ids, and the
token-faithfulness check with the real embedded model (local_llama, SmolLM2-135M, offline).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_core import ModelServer, ServerClient, ToolError, hookimpl
from gym_core.schemas import FunctionCall, Message, OutputText, Response, ResponseCreateParams, new_id
from gym_core.testing import (
    AgentServerTests,
    RunningServers,
    conformance_reward,
    conformance_tool_calls,
    first_party,
    plugin_manager,
    running_servers,
)

import gym_counter.plugin
import gym_local_llama.plugin
import gym_scripted.plugin
import gym_token_preserving.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIGS = PACKAGE / "configs"
COUNTER_TASKS = PACKAGE.parents[1] / "resources" / "counter" / "data" / "example.jsonl"
ADD_ONE = {"responses_create_params": {"input": "Add 1 to the counter."}, "initial_count": 0, "expected_count": 1}


class TokenCounting(ModelServer):
    """A model with a toy tokenizer: one token per input item, a fresh id each. It calls
    ``increment_counter(1)`` for ``metadata.calls`` turns (default 2), then says "done".

    It honours token history the way local_llama does: a request whose input carries token fields
    is prompted with the last carrier's prompt + generated ids, then one token per later item. Mode
    ``metadata.mode``: ``drift`` changes the first history id (a re-tokenising server), ``none``
    returns no token ids. It refuses a request that does not ask for token ids.
    """

    async def responses(self, params: ResponseCreateParams) -> Response:
        if params.return_token_ids is not True:
            raise ToolError("return_token_ids was not asked for", 400)
        meta = params.metadata or {}
        items = params.input if isinstance(params.input, list) else [Message(role="user", content=params.input)]
        carriers = [i for i, item in enumerate(items) if getattr(item, "generation_token_ids", None) is not None]
        if carriers:
            last = items[carriers[-1]]
            prompt = [*last.prompt_token_ids, *last.generation_token_ids]
            new = len(items) - carriers[-1] - 1
        else:
            prompt, new = [], len(items)
        prompt += [100 + len(prompt) + k for k in range(new)]
        if meta.get("mode") == "drift" and carriers:
            prompt[0] += 1
        turn = sum(isinstance(i, FunctionCall) or (isinstance(i, Message) and i.role == "assistant") for i in items)
        if turn < int(meta.get("calls", "2")):
            item: Any = FunctionCall(
                id=new_id("fc"), call_id=new_id("call"), name="increment_counter", arguments='{"count":1}'
            )
        else:
            item = Message(role="assistant", content=[OutputText(text="done")])
        generated = [1000 + turn, 2000 + turn]
        if meta.get("mode") != "none":
            item.prompt_token_ids, item.generation_token_ids = prompt, generated
            item.generation_log_probs = [-0.5, -0.25]
        return Response(model="token-counting", output=[item])


class HelperServers:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="token_counting", kind="model", server=TokenCounting)


def agent(model: str, **options: Any) -> dict[str, Any]:
    return {"plugin": "token_preserving", "model_server": model, "resources_server": "environment", **options}


def with_metadata(row: dict[str, Any], **metadata: str) -> dict[str, Any]:
    return {**row, "responses_create_params": {**row["responses_create_params"], "metadata": metadata}}


class TestTokenPreserving(AgentServerTests):
    # The kit runs the agent with the scripted policy (no token ids: require_token_ids false).
    instances = {
        "policy": {"plugin": "scripted"},
        "environment": {"plugin": "counter"},
        "token_preserving": agent("policy", require_token_ids=False),
        "strict_scripted": agent("policy"),
        "tokens": {"plugin": "token_counting"},
        "faithful": agent("tokens", max_steps=5),
        "lenient": agent("tokens", require_token_ids=False),
    }
    instance = "token_preserving"
    plugins = [gym_token_preserving.plugin, gym_scripted.plugin, gym_counter.plugin, HelperServers()]
    example_data = COUNTER_TASKS

    # The scripted policy makes the row's conformance tool calls in one turn, then stops.
    def run_body(self, row):
        calls = [{"name": name, "arguments": arguments} for name, arguments in conformance_tool_calls(row)]
        script = json.dumps([{"tool_calls": calls}, {"text": "done"}])
        return with_metadata(row, scripted_turns=script)

    def expected_reward(self, row):
        return conformance_reward(row)

    def test_token_ids_are_sent_back_and_every_turn_extends_the_last(self, gym_servers: RunningServers):
        row = {**ADD_ONE, "expected_count": 2}
        result = gym_servers.caller("faithful").post("/run", row).json()
        assert (result["reward"], result["final_count"]) == (1.0, 2)
        output = result["response"]["output"]
        assert [i["type"] for i in output] == ["function_call", "function_call_output"] * 2 + ["message"]
        generated = [i for i in output if i["type"] != "function_call_output"]
        # The model built each prompt from the ids the agent sent back: previous prompt + generated + new items.
        assert [g["prompt_token_ids"] for g in generated] == [
            [100],
            [100, 1000, 2000, 103],
            [100, 1000, 2000, 103, 1001, 2001, 106],
        ]
        assert all(g["generation_log_probs"] == [-0.5, -0.25] for g in generated)
        assert "prompt_token_ids" not in output[1]  # tool outputs carry no ids
        assert result["turns"] == [{"prompt_tokens": n, "generation_tokens": 2, "drifted_tokens": 0} for n in (1, 4, 7)]
        assert (result["token_drift"], result["num_model_calls"], result["num_tool_calls"]) == (0, 3, 2)
        assert (result["agent"], result["model_server"], result["model"]) == ("faithful", "tokens", "token-counting")
        assert len(result["usage_per_turn"]) == 3 and result["environment"] == "counter"

    def test_a_re_tokenised_prompt_fails_the_rollout(self, gym_servers: RunningServers):
        reply = gym_servers.caller("faithful").post("/run", with_metadata(ADD_ONE, mode="drift"))
        assert reply.status == 424 and reply.json()["error"]["type"] == "ServerCallError", reply.text
        assert (
            "model call 2: its prompt does not begin with the previous call's prompt + generated ids (1 of 3"
            in reply.text
        )
        assert len(gym_servers.servers["environment"].sessions) == 0  # closed though it failed

    def test_drift_is_recorded_when_token_ids_are_not_required(self, gym_servers: RunningServers):
        result = gym_servers.caller("lenient").post("/run", with_metadata(ADD_ONE, mode="drift", calls="1")).json()
        assert [t["drifted_tokens"] for t in result["turns"]] == [0, 1]
        assert result["token_drift"] == 1 and result["reward"] == 1.0

    def test_a_model_without_token_ids_fails_the_rollout_unless_allowed(self, gym_servers: RunningServers):
        reply = gym_servers.caller("faithful").post("/run", with_metadata(ADD_ONE, mode="none"))
        assert reply.status == 424 and "model call 1 returned no token ids" in reply.text, reply.text
        scripted = gym_servers.caller("strict_scripted").post(
            "/run", self.run_body(json.loads(COUNTER_TASKS.read_text().splitlines()[0]))
        )
        assert scripted.status == 424 and "returned no token ids" in scripted.text
        lenient = gym_servers.caller("lenient").post("/run", with_metadata(ADD_ONE, mode="none", calls="1")).json()
        assert lenient["reward"] == 1.0 and lenient["turns"][0] == {
            "prompt_tokens": None,
            "generation_tokens": None,
            "drifted_tokens": 0,
        }
        assert len(gym_servers.servers["environment"].sessions) == 0

    def test_only_offered_tools_run_and_max_steps_bounds_the_loop(self, gym_servers: RunningServers):
        calls = [
            {"name": "seed_session", "arguments": {"initial_count": 7}},
            {"name": "increment_counter", "arguments": {"count": 2}},
        ]
        script = json.dumps([{"tool_calls": calls}])  # the same turn again and again
        row = {
            "responses_create_params": {"input": "go", "metadata": {"scripted_turns": script}},
            "initial_count": 0,
            "expected_count": 20,
        }
        result = gym_servers.caller().post("/run", row).json()
        assert result["num_model_calls"] == 10 and result["num_tool_calls"] == 20  # max_steps: 10
        assert result["final_count"] == 20  # only increment_counter ran
        unknown = [
            json.loads(i["output"]) for i in result["response"]["output"] if i["type"] == "function_call_output"
        ][0]
        assert unknown["error"].startswith("unknown tool 'seed_session'")

    def test_responses_runs_the_loop_without_verification(self, gym_servers: RunningServers):
        response = (
            gym_servers.caller("faithful").post("/v1/responses", {"input": "Add 1.", "metadata": {"calls": "1"}}).json()
        )
        assert [i["type"] for i in response["output"]] == ["function_call", "function_call_output", "message"]
        assert response["output"][-1]["prompt_token_ids"] == [100, 1000, 2000, 103]
        assert len(gym_servers.servers["environment"].sessions) == 0


def test_example_configs_name_servers_that_exist():
    manager = plugin_manager(
        gym_token_preserving.plugin, *first_party("scripted", "counter", "local_llama", "openai_model")
    )
    kinds = manager.servers()
    for path in CONFIGS.glob("*.yaml"):
        for name, options in yaml.safe_load(path.read_text()).items():
            assert options["plugin"] in kinds, (path.name, name)


# --- token faithfulness with the real model -------------------------------------------------------

COUNTER_TOOLS = [
    {
        "type": "function",
        "name": "increment_counter",
        "description": "Add `count` to the counter.",
        "parameters": {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]},
    },
]


def counter_examples() -> list[dict[str, Any]]:
    """A system turn and two earlier calls of the counter tool (no token ids: the first prompt renders them)."""
    items: list[dict[str, Any]] = [{"role": "system", "content": "You control a counter with tools."}]
    for n, (add, total) in enumerate([(2, 2), (3, 5)]):
        items += [
            {"role": "user", "content": f"Add {add} to the counter."},
            {
                "type": "function_call",
                "call_id": f"call_{n}",
                "name": "increment_counter",
                "arguments": json.dumps({"count": add}),
            },
            {"type": "function_call_output", "call_id": f"call_{n}", "output": json.dumps({"count": total})},
        ]
    return items


@pytest.fixture(scope="module")
def engine():
    from gym_local_llama.engine import LlamaEngine

    with LlamaEngine(n_ctx=2048, n_threads=1, prefix_cache=False) as fresh:
        yield fresh


async def test_three_turns_with_local_llama_extend_the_previous_tokens_exactly(engine):
    """Turn k's prompt ids are turn k-1's prompt ids + generated ids, then only the new content's
    tokens; the log-probs returned are the engine's own for those tokens, recomputed here."""
    from gym_local_llama.engine import render_continuation

    config = {"policy": {"plugin": "local_llama", "n_ctx": 2048, "n_threads": 1}}
    # The first turn may call the tool (the examples make it likely): room for a whole call.
    sampling = [
        {"temperature": 0, "max_output_tokens": 32},
        {"temperature": 0, "max_output_tokens": 6},
        {"temperature": 0.9, "seed": 7, "max_output_tokens": 6},
    ]
    items: list[Any] = [*counter_examples(), {"role": "user", "content": "Add 4 to the counter."}]
    turns = []
    with running_servers(config, plugins=plugin_manager(gym_local_llama.plugin)) as running:
        async with ServerClient(running) as client:
            for k, settings in enumerate(sampling):
                body = {"input": items, "tools": COUNTER_TOOLS, "return_token_ids": True, **settings}
                response = await client.post("policy", "/v1/responses", body)
                last = response["output"][-1]
                turns.append((last["prompt_token_ids"], last["generation_token_ids"], last["generation_log_probs"]))
                # The next turn's new content: the tool outputs of the calls made, or the count as a user turn.
                calls = [i for i in response["output"] if i["type"] == "function_call"]
                new = [
                    {"type": "function_call_output", "call_id": c["call_id"], "output": json.dumps({"count": k + 1})}
                    for c in calls
                ] or [{"role": "user", "content": f"The counter is {k + 1}. Add 1 again."}]
                items = [*items, *response["output"], *new]
                turns[-1] += (new,)
    for k in range(1, len(turns)):
        history = turns[k - 1][0] + turns[k - 1][1]
        prompt = turns[k][0]
        assert prompt[: len(history)] == history, f"turn {k + 1} re-tokenised the conversation"
        # Only the new content was tokenized: as the chat template's turns after the previous reply.
        messages = [
            {"role": "tool", "content": i["output"]} if i.get("type") == "function_call_output" else i
            for i in turns[k - 1][3]
        ]
        continuation = render_continuation(messages, close_assistant_turn=history[-1] not in engine.eog_token_ids)
        assert prompt[len(history) :] == engine.llm.tokenize(continuation.encode(), add_bos=False, special=True)
    for prompt, generated, log_probs, _ in turns:
        assert len(generated) == len(log_probs) > 0
        assert engine.log_probs(prompt, generated) == log_probs


async def test_a_rollout_with_local_llama_keeps_token_ids_on_every_generated_item(engine):
    config = yaml.safe_load((CONFIGS / "token_preserving_local.yaml").read_text())
    config["policy_model"].update(max_tokens=12, n_ctx=2048, n_threads=1, temperature=0)
    manager = plugin_manager(gym_token_preserving.plugin, gym_local_llama.plugin, gym_counter.plugin)
    row = json.loads(COUNTER_TASKS.read_text().splitlines()[0])
    with running_servers(config, plugins=manager) as running:
        async with ServerClient(running) as client:
            result = await client.post("counter_agent", "/run", row)
    assert result["token_drift"] == 0 and result["num_model_calls"] >= 1
    carriers = [i for i in result["response"]["output"] if "generation_token_ids" in i]
    assert len(carriers) == result["num_model_calls"]
    for item in carriers:
        assert engine.log_probs(item["prompt_token_ids"], item["generation_token_ids"]) == item["generation_log_probs"]
