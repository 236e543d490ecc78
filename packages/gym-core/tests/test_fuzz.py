"""Property-based fuzzing of every POST endpoint of each server kind: no input may give a 5xx.

Bodies are valid templates with one part mutated (a value replaced by any JSON, a key dropped),
arbitrary JSON, or arbitrary bytes; the known killers (deep nesting, a ``type`` that is an object,
invalid UTF-8...) are listed explicitly too. Examples are derandomized and bounded, so that the
suite stays deterministic and takes seconds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gym_core.auth import new_token
from gym_core.testing import HTTPCaller, plugin_manager, running_servers

import gym_counter.plugin
import gym_scripted.plugin
import gym_simple_agent.plugin

SCRIPT = json.dumps([{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 1}}]}, {"text": "done"}])
MESSAGE = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
ANSWER = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "1", "annotations": []}]}
CALL = {"type": "function_call", "call_id": "c1", "name": "increment_counter", "arguments": '{"count": 1}'}
TOOL = {"type": "function", "name": "increment_counter", "parameters": {"type": "object", "properties": {}}}
PARAMS = {"input": [MESSAGE], "tools": [TOOL], "max_output_tokens": 8, "metadata": {"scripted_turns": SCRIPT}}

# (instance, path) -> a valid body to mutate
TEMPLATES: dict[tuple[str, str], dict[str, Any]] = {
    ("policy", "/v1/responses"): PARAMS,
    ("policy", "/v1/chat/completions"): {
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "response_format": {"type": "text"},  # the scripted model honours no JSON mode (a 400)
        "max_tokens": 8,
        "metadata": {"scripted_turns": SCRIPT},
    },
    ("env", "/seed_session"): {"responses_create_params": PARAMS, "initial_count": 1},
    ("env", "/verify"): {
        "responses_create_params": PARAMS,
        "response": {"output": [CALL, ANSWER]},
        "expected_count": 1,
    },
    ("env", "/tools/increment_counter"): {"count": 1},
    ("env", "/close_session"): {},
    ("agent", "/run"): {"responses_create_params": PARAMS, "initial_count": 0, "expected_count": 1},
    ("agent", "/v1/responses"): PARAMS,
}

KEYS = st.sampled_from(
    [
        "type",
        "role",
        "content",
        "text",
        "input",
        "output",
        "tools",
        "function",
        "name",
        "arguments",
        "call_id",
        "responses_create_params",
        "response",
        "messages",
        "metadata",
        "tool_calls",
        "parameters",
        "count",
    ]
) | st.text(max_size=6)
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON = st.recursive(
    LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4), max_leaves=10
)


def mutations(value: Any) -> st.SearchStrategy[Any]:
    """``value`` with one part, at any depth, replaced by arbitrary JSON or (in an object) dropped."""
    options = [JSON]
    if isinstance(value, dict) and value:
        keys = st.sampled_from(sorted(value))
        options.append(keys.flatmap(lambda k: mutations(value[k]).map(lambda v: {**value, k: v})))
        options.append(keys.map(lambda k: {kk: vv for kk, vv in value.items() if kk != k}))
    if isinstance(value, list) and value:
        index = st.integers(0, len(value) - 1)
        options.append(index.flatmap(lambda i: mutations(value[i]).map(lambda v: [*value[:i], v, *value[i + 1 :]])))
    return st.one_of(*options)


def bodies(template: dict[str, Any]) -> st.SearchStrategy[bytes]:
    as_json = st.one_of(mutations(template), JSON).map(lambda v: json.dumps(v, allow_nan=False).encode())
    return st.one_of(as_json, as_json, st.binary(max_size=40))


KILLERS = [
    b"[" * 1000 + b"]" * 1000,  # RecursionError in the decoder
    b'{"a":' * 1000 + b"1" + b"}" * 1000,
    b'{"input": [{"type": {"a": 1}, "role": "user", "content": "x"}]}',  # unhashable type
    b'{"input": [{"type": [1], "content": "x"}], "responses_create_params": {"input": [{"type": []}]}}',
    b'{"responses_create_params": null}',
    b'{"responses_create_params": 5}',
    b'{"responses_create_params": [1]}',
    b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}',  # chat tool without function
    b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {}}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}',
    b'{"\xff\xfe": 1, "input": "x"}',  # invalid UTF-8 in a key
    b'{"responses_create_params": {}, "response": {"output": [{"type": {"a": 1}}]}}',
    b"\xff",
    b"",
    b"null",
    b"1e400",
]


@pytest.fixture(scope="module")
def servers():
    config = {
        "auth_token": new_token(),
        "policy": {"plugin": "scripted"},
        "env": {"plugin": "counter"},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "env", "max_steps": 2},
    }
    plugins = plugin_manager(gym_counter.plugin, gym_scripted.plugin, gym_simple_agent.plugin)
    with running_servers(config, plugins) as global_config:
        yield global_config


def post(servers, instance: str, path: str, body: bytes):
    caller = HTTPCaller(servers.instances[instance].url, 60, auth_token=servers.auth_token)
    if path.startswith("/tools/") or path == "/verify":
        caller.post("/seed_session", {"initial_count": 0})  # so that the body, not a missing session, decides
    return caller.post(path, body)


def assert_no_5xx(reply, what: str) -> None:
    assert reply.status < 500, f"{what}: {reply.status} {reply.text[:300]}"
    if reply.status >= 400:
        error = reply.json()["error"]
        assert isinstance(error["message"], str) and error["status"] == reply.status, reply.text[:300]


@pytest.mark.parametrize(("instance", "path"), sorted(TEMPLATES))
def test_the_known_killers_get_a_4xx(servers, instance, path):
    for body in KILLERS:
        assert_no_5xx(post(servers, instance, path, body), f"{instance} {path} {body[:60]!r}")


@pytest.mark.parametrize(("instance", "path"), sorted(TEMPLATES))
def test_no_body_gets_a_5xx(servers, instance, path):
    @settings(
        max_examples=40,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(body=bodies(TEMPLATES[(instance, path)]))
    def check(body: bytes) -> None:
        assert_no_5xx(post(servers, instance, path, body), f"{instance} {path} {body[:200]!r}")

    check()


def test_the_templates_are_valid(servers):
    """The mutations start from bodies each endpoint accepts (else the fuzzing only tests refusals)."""
    for (instance, path), template in TEMPLATES.items():
        reply = post(servers, instance, path, json.dumps(template).encode())
        assert reply.status == 200, f"{instance} {path}: {reply.status} {reply.text[:300]}"
