"""Tests of the workplace_assistant plugin over HTTP, real servers on loopback: gym's conformance kit
for a resources server, then the tool endpoints and verify as a client sees them.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The rollout test needs gym's first-party plugins too; it is skipped
where they are not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

import copy
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
from gym_core.testing.kit import NOT_AN_OBJECT, NOT_JSON

import gym_workplace_assistant.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIG = PACKAGE / "configs" / "workplace_assistant.yaml"
ROWS = read_rows(PACKAGE / "data" / "example.jsonl")


def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_workplace_assistant.plugin, *others)


def calls(*steps: tuple[str, Any]) -> dict[str, Any]:
    """A response whose output is one function call per step (arguments: an object, or raw text)."""
    output = [
        {
            "type": "function_call",
            "name": name,
            "call_id": f"c{i}",
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        }
        for i, (name, arguments) in enumerate(steps)
    ]
    return {"output": [*output, *assistant_response("Done.")["output"]]}


def task(ground_truth: Any, **changes: Any) -> dict[str, Any]:
    row = {key: value for key, value in copy.deepcopy(ROWS[0]).items() if key != "conformance"}
    return {**row, "ground_truth": ground_truth, **changes}


def gt(name: str, arguments: dict[str, Any]) -> dict[str, str]:
    return {"name": name, "arguments": json.dumps(arguments)}


SEND = {"recipient": "ben.carter@lumenfield.com", "subject": "Hello", "body": "Hi Ben"}


class TestWorkplaceAssistant(ResourcesServerTests):
    server_type = "workplace_assistant"
    plugins = [gym_workplace_assistant.plugin]
    example_data = PACKAGE / "data" / "example.jsonl"

    def malformed_bodies(self, servers: RunningServers) -> dict[str, list[bytes]]:
        # As in the reference, a tool answers arguments it cannot use (missing, unexpected, of the
        # wrong type) with {"output": "Error executing tool ..."} and status 200, so only bodies
        # that are no arguments object at all are refused.
        bodies = super().malformed_bodies(servers)
        for path in bodies:
            if path not in ("/seed_session", "/verify"):
                bodies[path] = [NOT_JSON, NOT_AN_OBJECT]
        return bodies

    def tool_arguments(self, tool: dict[str, Any]) -> dict[str, Any]:
        # Give the search tools a filter, so that every call exercises the tool.
        arguments = super().tool_arguments(tool)
        if tool["name"] in ("project_management_search_tasks", "customer_relationship_manager_search_customers"):
            arguments["status" if "customer" in tool["name"] else "board"] = "a"
        return arguments

    def verdict(self, servers: RunningServers, row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        reply = servers.caller().post("/verify", {**row, "response": response})
        assert reply.status == 200, reply.text
        return reply.json()

    def seeded(self, servers: RunningServers) -> HTTPCaller:
        caller = servers.caller()
        assert caller.post("/seed_session", ROWS[0]).status == 200
        return caller

    # --- tools ----------------------------------------------------------------------------------

    def test_the_rows_offer_exactly_the_served_tools(self, gym_servers: RunningServers):
        served = gym_servers.caller().get("/tools").json()
        assert len(served) == 27
        for row in ROWS:
            assert row["responses_create_params"]["tools"] == served
            assert row["responses_create_params"]["parallel_tool_calls"] is False

    def test_an_unseeded_session_fails_the_rollout(self, gym_servers: RunningServers):
        # The reference answers 400; gym's session contract makes it session_expired (409), which
        # agents turn into a failed rollout rather than an output the model sees.
        reply = gym_servers.caller().post("/tools/email_send_email", SEND)
        assert (reply.status, reply.json()["error"]["type"]) == (409, "session_expired"), reply.text
        assert "seed" in reply.json()["error"]["message"]

    def test_tools_answer_output_and_change_the_session_state(self, gym_servers: RunningServers):
        caller = self.seeded(gym_servers)
        assert caller.post("/tools/email_send_email", SEND).json() == {"output": "Email sent successfully."}
        found = caller.post("/tools/email_search_emails", {"query": "hi ben", "date_min": "2023-11-30"}).json()[
            "output"
        ]
        assert found["pagination"] == {"total_emails": 1, "page": 1, "page_size": 5, "total_pages": 1}
        assert found["emails"][0] == {
            "email_id": "500",
            "inbox/outbox": "outbox",
            "sender/recipient": "ben.carter@lumenfield.com",
            "subject": "Hello",
            "sent_datetime": "2023-11-30 23:59:00",
            "body": "Hi Ben",
        }
        # Another session does not see it.
        other = self.seeded(gym_servers)
        found = other.post("/tools/email_search_emails", {"query": "hi ben", "date_min": "2023-11-30"}).json()
        assert found == {"output": "No emails found."}

    def test_failures_are_outputs_not_errors(self, gym_servers: RunningServers):
        caller = self.seeded(gym_servers)
        cases = {
            (
                "email_send_email",
                json.dumps({"recipient": "nobody", "subject": "s", "body": "b"}),
            ): "Invalid recipient email address.",
            ("email_send_email", json.dumps({**SEND, "cc": "x@y.z"})): (
                "Error executing tool 'email_send_email': "
                "WorkplaceAssistantServer.email_send_email() got an unexpected keyword argument 'cc'"
            ),
            ("email_search_emails", json.dumps({"date_min": "last week"})): (
                "Error executing tool 'email_search_emails': Invalid isoformat string: 'last week'"
            ),
            (
                "calendar_delete_event",
                json.dumps({"event_id": "12"}),
            ): "Event ID must be an 8-digit string, such as '00000123'.",
        }
        for (name, body), expected in cases.items():
            reply = caller.post(f"/tools/{name}", body.encode())
            assert (reply.status, reply.json()) == (200, {"output": expected}), (name, reply.text)
        missing = caller.post("/tools/email_send_email", {"recipient": "a@b.c"})
        assert missing.status == 200
        assert missing.json()["output"].startswith("Error executing tool 'email_send_email': "), missing.text
        assert "missing 2 required" in missing.json()["output"], missing.text

    def test_null_arguments_are_dropped(self, gym_servers: RunningServers):
        caller = self.seeded(gym_servers)
        reply = caller.post("/tools/email_search_emails", {"query": "caching layer", "date_min": None, "page": None})
        assert reply.json()["output"]["pagination"]["page"] == 1
        assert (
            caller.post("/tools/email_delete_email", {"email_id": None})
            .json()["output"]
            .startswith("Error executing tool")
        )

    def test_a_pathological_directory_pattern_is_an_error_not_a_stall(self, gym_servers: RunningServers):
        caller = self.seeded(gym_servers)
        found = caller.post("/tools/company_directory_find_email_address", {"name": "PRIYA"}).json()
        assert found == {"output": ["priya.raman@lumenfield.com"]}
        reply = caller.post(
            "/tools/company_directory_find_email_address", {"name": r"(.?){13}(.?){13}\1\2\W\W"}
        ).json()["output"]
        assert reply.startswith("Error executing tool 'company_directory_find_email_address'"), reply
        assert (
            caller.post("/tools/company_directory_find_email_address", {"name": "("})
            .json()["output"]
            .startswith("Error executing tool")
        )

    # --- verify ---------------------------------------------------------------------------------

    def test_verify_replays_instead_of_reading_the_session(self, gym_servers: RunningServers):
        row = task([gt("email_send_email", SEND)])
        caller = self.seeded(gym_servers)
        caller.post("/tools/email_send_email", SEND)  # the live state matches, but the response has no call
        assert caller.post("/verify", {**row, "response": assistant_response("Sent.")}).json()["reward"] == 0.0
        assert caller.post("/verify", {**row, "response": calls(("email_send_email", SEND))}).json()["reward"] == 1.0

    def test_a_string_ground_truth_runs_no_action(self, gym_servers: RunningServers):
        row = task("nothing to change")
        assert self.verdict(gym_servers, row, calls(("email_search_emails", {"query": "x"})))["reward"] == 1.0
        assert self.verdict(gym_servers, row, calls(("email_send_email", SEND)))["reward"] == 0.0

    def test_order_of_deletion_and_insertion_matters(self, gym_servers: RunningServers):
        delete = {"email_id": "00000007"}
        row = task([gt("email_delete_email", delete), gt("email_send_email", SEND)])
        assert (
            self.verdict(gym_servers, row, calls(("email_delete_email", delete), ("email_send_email", SEND)))["reward"]
            == 1.0
        )
        assert (
            self.verdict(gym_servers, row, calls(("email_send_email", SEND), ("email_delete_email", delete)))["reward"]
            == 0.0
        )

    def test_rows_with_nulls_and_a_string_id_are_accepted(self, gym_servers: RunningServers):
        row = task([gt("email_send_email", SEND)], id="0")
        row["responses_create_params"] = {
            **row["responses_create_params"],
            "temperature": None,
            "max_output_tokens": None,
        }
        response = {**calls(("email_send_email", SEND)), "usage": None, "incomplete_details": None}
        assert self.verdict(gym_servers, row, response) == {"reward": 1.0}

    @pytest.mark.parametrize("field", ["ground_truth", "id", "category", "environment_name"])
    def test_a_row_missing_a_field_is_a_422_naming_it(self, gym_servers: RunningServers, field):
        row = task([])
        del row[field]
        reply = gym_servers.caller().post("/verify", {**row, "response": assistant_response("")})
        assert reply.status == 422, reply.text
        assert f"missing required field `{field}`" in reply.json()["error"]["message"]

    @pytest.mark.parametrize(
        ("changes", "message"),
        [
            ({"id": "zero"}, "id must be an integer"),
            ({"ground_truth": [{"arguments": "{}"}]}, "name"),
            ({"category": 3}, "category"),
        ],
    )
    def test_a_bad_row_field_is_a_422(self, gym_servers: RunningServers, changes, message):
        reply = gym_servers.caller().post("/verify", {**task([]), **changes, "response": assistant_response("")})
        assert reply.status == 422, reply.text
        assert message in reply.json()["error"]["message"]


def test_replay_past_the_time_limit_gives_reward_0_with_a_reason():
    steps = [("email_send_email", SEND)] * 3000
    with running_servers(
        {"wa": {"plugin": "workplace_assistant", "verify_timeout_s": 0.001}}, plugins=plugins()
    ) as config:
        caller = HTTPCaller(config.instances["wa"].url)
        verdict = caller.post("/verify", {**task([]), "response": calls(*steps)}).json()
        assert verdict == {"reward": 0.0, "reason": "timeout"}


def test_options_change_the_tables():
    small = {"plugin": "workplace_assistant", "emails": 3, "seed": 7}
    with running_servers({"wa": small}, plugins=plugins()) as config:
        caller = HTTPCaller(config.instances["wa"].url)
        caller.post("/seed_session", task([]))
        assert (
            caller.post("/tools/email_search_emails", {"page_size": 10}).json()["output"]["pagination"]["total_emails"]
            == 3
        )


async def test_rollouts_through_simple_agent():
    # The scripted model plays each example's calls, one per turn, then its final message: the
    # agent executes them against the environment and the verdict is the example's reward.
    manager = plugins(*first_party("scripted", "simple_agent"))
    with running_servers(yaml.safe_load(CONFIG.read_text()), plugins=manager) as config:
        async with ServerClient(config) as client:
            for row in ROWS:
                output = row["conformance"]["response"]["output"]
                turns = [
                    {"tool_calls": [{"name": item["name"], "arguments": json.loads(item["arguments"])}]}
                    for item in output
                    if item["type"] == "function_call" and item["arguments"].endswith("}")
                ]
                turns.append({"text": output[-1]["content"][0]["text"]})
                params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps(turns)}}
                result = await client.post("agent", "/run", {**row, "responses_create_params": params})
                assert result["reward"] == row["conformance"]["reward"], (row["id"], result)
