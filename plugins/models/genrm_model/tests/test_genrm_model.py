"""Tests of the genrm_model plugin, real servers on loopback: gym's conformance kit for a model
server, then the rendering of the pairwise roles, checked by what the upstream (gym's scripted
model, whose ``rules`` answer by the text it receives) was sent.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from gym_core.config import free_port
from gym_core.schemas import (
    FunctionCall,
    FunctionCallOutput,
    Message,
    OutputText,
    Reasoning,
    ResponseCreateParams,
    decode_create_params,
    decode_response,
    output_text,
)
from gym_core.testing import ModelServerTests, RunningServers

import gym_genrm_model.plugin
import gym_scripted.plugin
from gym_genrm_model.config import DEFAULT_TEXT_TEMPLATE, GenrmModelConfig
from gym_genrm_model.server import (
    native_messages,
    render_conversation,
    render_text_prompt,
    rendered_request,
)

VERDICT = '{"score_1": 5, "score_2": 2, "ranking": 1}'
NATIVE_VERDICT = '```json\n{"score_1": 4, "score_2": 4, "ranking": 3}\n```'
NO_PRINCIPLE_VERDICT = '{"score_1": 1, "score_2": 1, "ranking": 6}'
SECRET = "sk-test-secret-never-shown"
CONVERSATION = [{"role": "user", "content": "Which is the capital of France?"}]
PAIR = {"response_1": "Paris.", "response_2": "Lyon, I think.", "principle": "Prefer correct answers."}


def params(**fields) -> ResponseCreateParams:
    return decode_create_params({"input": CONVERSATION, **fields})


def text_config(**options) -> GenrmModelConfig:
    return msgspec.convert({"upstream_model_server": "rm", **options}, GenrmModelConfig)


# --- rendering, pure functions -----------------------------------------------------------------


def test_native_roles_follow_the_conversation_in_order():
    request = rendered_request(text_config(rendering="native"), params(metadata=PAIR))
    assert [(m.role, m.content) for m in request.messages] == [
        ("user", "Which is the capital of France?"),
        ("principle", "Prefer correct answers."),
        ("response_1", "Paris."),
        ("response_2", "Lyon, I think."),
    ]
    assert request.metadata is None  # never forwarded


def test_native_principle_only_when_supported_and_non_empty():
    assert [m.role for m in native_messages(PAIR, supports_principle_role=False)] == ["response_1", "response_2"]
    assert [m.role for m in native_messages({**PAIR, "principle": ""}, True)] == ["response_1", "response_2"]
    # A key that is absent is not appended (the spec's "if the key is present").
    assert [m.role for m in native_messages({"response_2": "x"}, True)] == ["response_2"]


def test_text_rendering_is_one_user_message_asking_for_the_json():
    request = rendered_request(text_config(), params(metadata=PAIR))
    assert [m.role for m in request.messages] == ["user"] and request.metadata is None
    prompt = request.messages[0].content
    assert "User: Which is the capital of France?" in prompt
    assert prompt.index("[Response 1]\nParis.") < prompt.index("[Response 2]\nLyon, I think.")
    assert "Judge the responses by this principle: Prefer correct answers." in prompt
    assert '{"score_1": <1-5>, "score_2": <1-5>, "ranking": <1-6>}' in prompt
    without = rendered_request(text_config(supports_principle_role=False), params(metadata=PAIR))
    assert "Prefer correct answers" not in without.messages[0].content


def test_text_placeholders_are_filled_once():
    # A response quoting a placeholder is judged as written, never filled in again.
    prompt = render_text_prompt("A={response_1} B={response_2} {other}", "", "{response_2}", "b")
    assert prompt == "A={response_2} B=b {other}"


def test_text_rendering_needs_both_responses():
    with pytest.raises(msgspec.ValidationError, match="response_2"):
        rendered_request(text_config(), params(metadata={"response_1": "a"}))


def test_without_a_pair_the_request_passes_through_without_metadata():
    plain = params(metadata={"note": "x"}, temperature=0.2)
    for rendering in ("text", "native"):
        request = rendered_request(text_config(rendering=rendering), plain)
        assert [(m.role, m.content) for m in request.messages] == [("user", "Which is the capital of France?")]
        assert request.metadata is None and request.temperature == 0.2


def test_conversation_rendering_covers_every_item_kind():
    params = ResponseCreateParams(
        instructions="Be terse.",
        input=[
            Message(role="user", content="Add 2 and 3."),
            Reasoning(summary=[]),
            FunctionCall(call_id="c1", name="add", arguments='{"a":2,"b":3}'),
            FunctionCallOutput(call_id="c1", output="5"),
            Message(role="assistant", content=[OutputText(text="5")]),
        ],
    )
    assert render_conversation(params) == (
        'System: Be terse.\n\nUser: Add 2 and 3.\n\nAssistant (tool call): add({"a":2,"b":3})'
        "\n\nTool result: 5\n\nAssistant: 5"
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "exactly one of"),
        ({"upstream_model_server": "rm", "base_url": "http://127.0.0.1:1/v1", "model": "m"}, "exactly one of"),
        ({"base_url": "http://127.0.0.1:1/v1"}, "model"),
        ({"upstream_model_server": "rm", "api_key": "k"}, "api_key"),
    ],
)
def test_config_needs_exactly_one_upstream(options, message):
    with pytest.raises(msgspec.ValidationError, match=message):
        msgspec.convert(options, GenrmModelConfig)


def test_default_template_names_every_placeholder():
    for name in ("{conversation}", "{response_1}", "{response_2}", "{principle}"):
        assert name in DEFAULT_TEXT_TEMPLATE


# --- over HTTP, with the scripted model as the reward model --------------------------------------


class TestGenrmModel(ModelServerTests):
    plugins = [gym_genrm_model.plugin, gym_scripted.plugin]
    instance = "genrm"
    deterministic = True  # the scripted upstream answers the kit's requests with one line

    @classmethod
    def instances_config(cls):
        port = free_port()  # the scripted model is also the OpenAI-compatible endpoint of base_url
        rules = [
            # text rendering: the responses in order, the principle block, the JSON request
            {
                "match": r"(?s)User: Which is the capital.*\[Response 1\]\nParis\.\n.*\[Response 2\]\nLyon, I think\."
                r".*principle: Prefer correct answers\..*\"ranking\": <1-6>",
                "text": VERDICT,
            },
            # native rendering (scripted reads unknown roles as user turns): conversation, principle, 1, 2
            {
                "match": r"^Which is the capital of France\?\nPrefer correct answers\.\nParis\.\nLyon, I think\.$",
                "text": NATIVE_VERDICT,
            },
            {"match": r"^Which is the capital of France\?\nParis\.\nLyon, I think\.$", "text": NO_PRINCIPLE_VERDICT},
            {"match": "fail upstream", "error_status": 500},
        ]
        return {
            "rm": {"plugin": "scripted", "port": port, "rules": rules, "turns": [{"text": "Hello."}]},
            "genrm": {"plugin": "genrm_model", "upstream_model_server": "rm", "max_attempts": 1},
            "genrm_native": {"plugin": "genrm_model", "upstream_model_server": "rm", "rendering": "native"},
            "genrm_native_no_principle": {
                "plugin": "genrm_model",
                "upstream_model_server": "rm",
                "rendering": "native",
                "supports_principle_role": False,
            },
            "genrm_url": {"plugin": "genrm_model", "base_url": f"http://127.0.0.1:{port}/v1", "model": "scripted"},
            "genrm_keyed": {
                "plugin": "genrm_model",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": "scripted",
                "api_key": SECRET,
                "max_attempts": 1,
            },
        }

    def ask(self, servers: RunningServers, instance: str, metadata: dict[str, str]):
        return servers.caller(instance).post("/v1/responses", {"input": CONVERSATION, "metadata": metadata})

    def test_text_rendering_reaches_the_upstream(self, gym_servers: RunningServers):
        reply = self.ask(gym_servers, "genrm", PAIR)
        assert reply.status == 200, reply.text
        assert output_text(decode_response(reply.body)) == VERDICT

    def test_native_rendering_reaches_the_upstream(self, gym_servers: RunningServers):
        assert output_text(decode_response(self.ask(gym_servers, "genrm_native", PAIR).body)) == NATIVE_VERDICT
        no_principle = self.ask(gym_servers, "genrm_native_no_principle", PAIR)
        assert output_text(decode_response(no_principle.body)) == NO_PRINCIPLE_VERDICT

    def test_metadata_is_not_forwarded(self, gym_servers: RunningServers):
        # The scripted model would follow a script carried in metadata: it must never see one.
        leak = {"scripted_turns": json.dumps([{"text": "LEAKED"}])}
        for instance in ("genrm", "genrm_native"):
            assert output_text(decode_response(self.ask(gym_servers, instance, leak).body)) == "Hello."

    def test_chat_completions_carry_the_pair_in_metadata_too(self, gym_servers: RunningServers):
        body = {"messages": CONVERSATION, "metadata": PAIR}
        completion = gym_servers.caller("genrm").post("/v1/chat/completions", body).json()
        assert completion["choices"][0]["message"]["content"] == VERDICT

    def test_a_half_pair_is_refused_with_422(self, gym_servers: RunningServers):
        reply = self.ask(gym_servers, "genrm", {"response_1": "Paris."})
        assert reply.status == 422 and "response_2" in reply.json()["error"]["message"], reply.text

    def test_openai_compatible_base_url(self, gym_servers: RunningServers):
        assert output_text(decode_response(self.ask(gym_servers, "genrm_url", PAIR).body)) == VERDICT

    def test_upstream_failure_is_a_typed_502(self, gym_servers: RunningServers):
        reply = gym_servers.caller("genrm").post("/v1/responses", {"input": "fail upstream"})
        assert reply.status == 502 and reply.json()["error"]["type"] == "tool_error", reply.text

    def test_a_parameter_it_would_drop_is_a_400_naming_it(self, gym_servers: RunningServers):
        caller = gym_servers.caller("genrm")
        for body, field in [
            ({"messages": CONVERSATION, "metadata": PAIR, "stop": ["\n"]}, "'stop'"),
            ({"messages": CONVERSATION, "metadata": PAIR, "n": 2}, "'n'"),
        ]:
            reply = caller.post("/v1/chat/completions", body)
            assert reply.status == 400 and field in reply.json()["error"]["message"], reply.text
        streamed = caller.post("/v1/responses", {"input": CONVERSATION, "metadata": PAIR, "stream": True})
        assert streamed.status == 200 and b"response.completed" in streamed.body

    def test_the_api_key_is_sent_and_never_shown(self, gym_servers: RunningServers):
        # The key replaces the run's token: the scripted endpoint refuses it, and the answer says so
        # without the key (the config, as the head server publishes it, has it redacted too).
        reply = self.ask(gym_servers, "genrm_keyed", PAIR)
        assert reply.status == 424 and reply.json()["error"]["type"] == "unauthorized", reply.text
        assert SECRET not in reply.text
        assert SECRET not in json.dumps(gym_servers.config.redacted())


def test_configs_load():
    from pathlib import Path

    import yaml

    from gym_core.config import load_config
    from gym_core.plugins import PluginManager

    servers = PluginManager().servers()
    for path in sorted((Path(__file__).parents[1] / "configs").glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        overrides = [
            f"{name}.{key}=x"
            for name, options in config.items()
            if isinstance(options, dict)
            for key, value in options.items()
            if value == "???"
        ]
        overrides = [o.replace("base_url=x", "base_url=http://127.0.0.1:1/v1") for o in overrides]
        loaded = load_config([path], overrides=overrides, env_file=None, server_types=servers)
        assert loaded.instances["genrm"].plugin == "genrm_model"
