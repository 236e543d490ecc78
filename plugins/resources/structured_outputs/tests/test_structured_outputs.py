"""Tests of the structured_outputs plugin, real servers on loopback: gym's conformance kit for a
resources server, verdicts over HTTP (text and tool-call mode, bad rows, pathological documents),
the aggregate metrics, and the scripted config end to end.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too; it
is skipped where they are not installed (in the plugin's own venv, say).

Each example row carries, in its ``conformance`` field (which the environment ignores), the output
a test sends for it (``response``: the text, or a whole response holding a function call) and the
reward that output must get (``reward``); gym's conformance kit reads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_core import PluginManager, ServerClient
from gym_core.testing import (
    HTTPCaller,
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_structured_outputs.plugin
from gym_structured_outputs.server import DESCRIPTIVE_FIELDS

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
CONFIG = PACKAGE / "configs" / "structured_outputs_scripted.yaml"

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}


def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_structured_outputs.plugin, *others)


def call_response(*calls: tuple[str, Any], **extra: Any) -> dict[str, Any]:
    """A response holding one function call per ``(name, arguments)``."""
    output = [
        {"type": "function_call", "call_id": f"call_{i}", "name": name, "arguments": arguments}
        for i, (name, arguments) in enumerate(calls)
    ]
    return {"output": output, **extra}


def task(schema: Any = PERSON, **fields: Any) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "q"}]},
        "schema_str": json.dumps(schema),
        **fields,
    }


class TestStructuredOutputs(ResourcesServerTests):
    server_type = "structured_outputs"
    plugins = [gym_structured_outputs.plugin]
    options = {"verify_workers": 2}
    example_data = EXAMPLES

    def test_example_rows_cover_every_format_and_both_outcomes(self):
        rows = read_rows(EXAMPLES)
        assert {row.get("schema_type") for row in rows} >= {"json", "yaml", "xml", "toml", "csv"}
        assert {row["conformance"]["reward"] for row in rows} == {0.0, 1.0}
        assert any(row.get("response_mode") == "tool_call" for row in rows)
        assert any(isinstance(row["conformance"]["response"], dict) for row in rows)  # a function call

    def test_valid_text_gets_reward_1_and_the_task_fields_back(self, gym_servers: RunningServers):
        body = task(
            schema_type="yaml", problem_type="single", num_tools=None, has_distractors=False, tool_choice="auto"
        )
        verdict = (
            gym_servers.caller()
            .post("/verify", {**body, "response": assistant_response("name: Ada\nage: 36\n")})
            .json()
        )
        assert verdict["reward"] == 1.0
        assert (verdict["error_type"], verdict["error_message"]) == (None, None)
        assert (verdict["schema_type"], verdict["response_mode"], verdict["problem_type"]) == ("yaml", "text", "single")
        assert verdict["has_distractors"] is False and verdict["tool_choice"] == "auto"
        assert set(DESCRIPTIVE_FIELDS) <= set(verdict)
        assert "schema_str" not in verdict

    @pytest.mark.parametrize(
        ("text", "schema_type", "error_type"),
        [
            ("  \n", "json", "empty_response"),
            ('```json\n{"name": "Ada", "age": 36}\n```', "json", "parse_error"),
            ('{"name": "Ada"}', "json", "validation_error"),
            ("name: Ada\nage: 36\n", "toml", "parse_error"),
            ("<r><name>Ada</name><age>36</age></r>", "xml", "validation_error"),  # the root is not declared
            ("name,age\nAda,36\n", "csv", "validation_error"),  # a list, the schema wants an object
        ],
    )
    def test_invalid_text_gets_reward_0_with_its_error_type(
        self, gym_servers: RunningServers, text, schema_type, error_type
    ):
        body = {**task(schema_type=schema_type), "response": assistant_response(text)}
        verdict = gym_servers.caller().post("/verify", body).json()
        assert (verdict["reward"], verdict["error_type"]) == (0.0, error_type), verdict
        assert isinstance(verdict["error_message"], str) and 0 < len(verdict["error_message"]) <= 200

    def test_xml_is_coerced_by_default(self, gym_servers: RunningServers):
        schema = {"type": "object", "properties": {"p": PERSON}}
        body = {
            **task(schema, schema_type="xml"),
            "response": assistant_response("<p><name>Ada</name><age>36</age></p>"),
        }
        assert gym_servers.caller().post("/verify", body).json()["reward"] == 1.0

    def test_a_bad_schema_is_a_schema_error(self, gym_servers: RunningServers):
        body = {**task(), "schema_str": "{oops", "response": assistant_response('{"name": "Ada", "age": 1}')}
        verdict = gym_servers.caller().post("/verify", body).json()
        assert (verdict["reward"], verdict["error_type"]) == (0.0, "schema_error")

    def test_any_mode_but_tool_call_is_text_mode(self, gym_servers: RunningServers):
        body = {**task(response_mode="whatever"), "response": assistant_response('{"name": "Ada", "age": 36}')}
        verdict = gym_servers.caller().post("/verify", body).json()
        assert (verdict["reward"], verdict["response_mode"]) == (1.0, "whatever")

    def test_nulls_read_as_defaults(self, gym_servers: RunningServers):
        body = task(schema_type=None, response_mode=None, tool_name=None, tool_payload_key=None, problem_type=None)
        verdict = (
            gym_servers.caller()
            .post("/verify", {**body, "response": assistant_response('{"name": "A", "age": 1}')})
            .json()
        )
        assert (verdict["reward"], verdict["schema_type"], verdict["response_mode"]) == (1.0, "json", "text")

    def test_a_row_without_schema_str_is_refused_naming_the_field(self, gym_servers: RunningServers):
        body = {"responses_create_params": {"input": "q"}, "response": assistant_response("{}")}
        reply = gym_servers.caller().post("/verify", body)
        assert reply.status == 422 and "schema_str" in reply.json()["error"]["message"]

    def test_an_unknown_schema_type_is_refused(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/verify", {**task(schema_type="ini"), "response": assistant_response("a=1")})
        assert reply.status == 422 and "schema_type" in reply.json()["error"]["message"]

    # --- tool-call mode ---

    def tool_verdict(self, servers: RunningServers, response: dict[str, Any], **fields: Any) -> dict[str, Any]:
        body = {**task(response_mode="tool_call", **fields), "response": response}
        return servers.caller().post("/verify", body).json()

    def test_tool_call_mode_rewards_a_valid_call(self, gym_servers: RunningServers):
        args = json.dumps({"extraction": {"name": "Ada", "age": 36}, "other": 1})
        verdict = self.tool_verdict(
            gym_servers, call_response(("save", args)), tool_name="save", tool_payload_key="extraction"
        )
        assert (verdict["reward"], verdict["error_type"]) == (1.0, None)
        # schema_type is ignored, and without a payload key the whole arguments object is checked.
        whole = json.dumps({"name": "Ada", "age": 36})
        assert self.tool_verdict(gym_servers, call_response(("any", whole)), schema_type="xml")["reward"] == 1.0

    def test_tool_call_arguments_may_be_an_object(self, gym_servers: RunningServers):
        verdict = self.tool_verdict(gym_servers, call_response(("save", {"name": "Ada", "age": 36})), tool_name="save")
        assert (verdict["reward"], verdict["error_type"]) == (1.0, None)

    @pytest.mark.parametrize(
        ("response", "fields", "error_type"),
        [
            (call_response(("save", "{}"), error={"code": "server_error", "message": "boom"}), {}, "api_error"),
            (assistant_response('{"name": "Ada", "age": 36}'), {}, "missing_tool_call"),
            (
                call_response(("save", '{"name": "A", "age": 1}'), ("save", '{"name": "B", "age": 2}')),
                {},
                "multiple_tool_calls",
            ),
            (call_response(("other", '{"name": "A", "age": 1}')), {"tool_name": "save"}, "wrong_tool_name"),
            (call_response(("save", '{"name": "A", "age": ')), {}, "tool_arguments_parse_error"),
            (
                call_response(("save", '{"name": "A", "age": 1}')),
                {"tool_payload_key": "extraction"},
                "missing_tool_payload_key",
            ),
            (call_response(("save", '{"name": "A", "age": "1"}')), {}, "validation_error"),
        ],
    )
    def test_tool_call_mode_errors(self, gym_servers: RunningServers, response, fields, error_type):
        verdict = self.tool_verdict(gym_servers, response, **fields)
        assert (verdict["reward"], verdict["error_type"]) == (0.0, error_type), verdict


def test_pathological_documents_score_0_without_stalling_the_server():
    # A catastrophic `pattern` (exponential backtracking) and a YAML alias bomb (exponential to walk).
    regex = task({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}})
    bomb_levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    bomb_levels += [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]" for i in range(8)]
    nested = {"type": ["array", "string"], "items": {"$ref": "#/$defs/nested"}}  # validation walks every leaf
    bomb = task(
        {"type": "object", "additionalProperties": {"$ref": "#/$defs/nested"}, "$defs": {"nested": nested}},
        schema_type="yaml",
    )
    config = {"structured_outputs": {"plugin": "structured_outputs", "verify_timeout_s": 0.5, "verify_workers": 1}}
    with running_servers(config, plugins=plugins()) as resolved:
        http = HTTPCaller(resolved.instances["structured_outputs"].url)
        slow = http.post("/verify", {**regex, "response": assistant_response(json.dumps({"s": "a" * 64 + "!"}))}).json()
        assert (slow["reward"], slow["error_type"]) == (0.0, "timeout"), slow
        exploded = http.post("/verify", {**bomb, "response": assistant_response("\n".join(bomb_levels))}).json()
        assert (exploded["reward"], exploded["error_type"]) == (0.0, "timeout"), exploded
        # The killed worker was replaced: the next answer is checked as usual.
        fine = http.post("/verify", {**regex, "response": assistant_response(json.dumps({"s": "aaa"}))}).json()
        assert (fine["reward"], fine["error_type"]) == (1.0, None)


def test_metrics_break_the_mean_reward_down_by_task_field():
    manager = plugins()
    rows = [
        {
            "environment": "structured_outputs",
            "reward": 1.0,
            "schema_type": "json",
            "problem_type": "a",
            "schema_repr": "json",
            "response_mode": "text",
            "error_type": None,
        },
        {
            "environment": "structured_outputs",
            "reward": 0.0,
            "schema_type": "yaml",
            "problem_type": "a",
            "error_type": "parse_error",
        },
        {
            "environment": "structured_outputs",
            "reward": 1.0,
            "response_mode": "tool_call",
            "num_tools": 16,
            "has_distractors": True,
            "parallel_tool_calls": False,
            "tool_choice": "required",
            "error_type": None,
        },
        {
            "environment": "structured_outputs",
            "reward": 0.0,
            "response_mode": "tool_call",
            "num_tools": 16,
            "has_distractors": True,
            "parallel_tool_calls": False,
            "tool_choice": "required",
            "error_type": "wrong_tool_name",
            "instruction_layout": "top",
            "tool_union_mode": "anyof",
        },
        {"environment": "counter", "reward": 1.0, "schema_type": "json"},
    ]
    metrics = manager.aggregate_metrics(rows)
    prefix = "structured_outputs/mean/reward_"
    assert metrics[prefix + "json"] == 2 / 3  # rows without schema_type count as json (its default)
    assert metrics[prefix + "yaml"] == 0.0
    assert metrics[prefix + "a"] == 0.5  # problem_type
    assert metrics[prefix + "repr_json"] == 1.0
    assert metrics[prefix + "response_mode_text"] == 0.5 and metrics[prefix + "response_mode_tool_call"] == 0.5
    assert metrics[prefix + "num_tools_16"] == 0.5
    assert metrics[prefix + "has_distractors_true"] == 0.5
    assert metrics[prefix + "parallel_tool_calls_false"] == 0.5
    assert metrics[prefix + "tool_choice_required"] == 0.5
    assert metrics[prefix + "instruction_layout_top"] == 0.0 and metrics[prefix + "tool_union_mode_anyof"] == 0.0
    assert metrics["structured_outputs/error_rate/parse_error"] == 0.25
    assert metrics["structured_outputs/error_rate/wrong_tool_name"] == 0.25
    assert not any(name.startswith(prefix + "tool_schema_mode_") for name in metrics)  # no row has it
    assert manager.aggregate_metrics([{"environment": "counter", "reward": 1.0}]) == {}


async def test_scripted_config_gets_each_examples_reward_end_to_end():
    # The scripted model plays each row's example output in one turn; simple_agent seeds, calls and verifies.
    manager = plugins(*first_party("scripted", "simple_agent"))
    config = yaml.safe_load(CONFIG.read_text())
    with running_servers(config, plugins=manager) as resolved:
        async with ServerClient(resolved) as client:
            checked = 0
            for row in read_rows(EXAMPLES):
                output = row["conformance"]["response"]
                if isinstance(output, dict):  # a response holding one function call
                    (call,) = output["output"]
                    try:  # the scripted model sends arguments it holds as an object
                        arguments = json.loads(call["arguments"])
                    except ValueError:
                        continue
                    turn = {"tool_calls": [{"name": call["name"], "arguments": arguments}]}
                else:
                    turn = {"text": output}
                params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps([turn])}}
                result = await client.post("agent", "/run", {**row, "responses_create_params": params})
                assert result["reward"] == row["conformance"]["reward"], result
                checked += 1
            assert checked >= 8
