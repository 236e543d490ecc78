"""Tests of the proof_refinement agent, real servers on loopback: gym's conformance kit over math's
example rows (math's correction feedback on; the scripted model answers each row with no answer,
then a wrong one, then its conformance response: exact per-attempt rewards), then the agent's
loop: the correction request (fresh, as the reference, or the conversation), every stop condition,
the attempt records, the session (seeded, carried to every verify, closed, failures too), typed
failures, the rollout's facts, the configs.

The scripted model (``metadata.scripted_turns``) gives exact outputs; helper servers registered like
any plugin play a verifier whose verdicts the row dictates and a model that fails.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_core import ModelServer, ResourcesServer, Session, hookimpl, load_config
from gym_core.schemas import ResponseCreateParams, SeedSessionRequest, VerifyRequest
from gym_core.testing import AgentServerTests, HTTPCaller, RunningServers, plugin_manager, read_rows, running_servers

import gym_math.plugin
import gym_proof_refinement.plugin
import gym_scripted.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIGS = PACKAGE / "configs"
MATH_ROWS = Path(gym_math.plugin.__file__).resolve().parents[2] / "data" / "example.jsonl"

NO_ANSWER = {"text": "I am not sure."}
WRONG = {"text": "The answer is \\boxed{-1000}."}


def earlier_turns(row: dict[str, Any]) -> int:
    """How many model turns the row's input already holds (the scripted model starts its script there)."""
    items = row["responses_create_params"]["input"]
    if isinstance(items, str):
        return 0
    turns, in_turn = 0, False
    for item in items:
        generated = item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning")
        turns += generated and not in_turn
        in_turn = generated
    return turns


def scripted(row: dict[str, Any], *turns: dict[str, Any], **params: Any) -> dict[str, Any]:
    """``row`` whose model answers ``turns`` in order (in its params' metadata), with ``params`` set."""
    script = [{"text": "(an earlier turn)"}] * earlier_turns(row) + list(turns)
    create = {**row["responses_create_params"], **params, "metadata": {"scripted_turns": json.dumps(script)}}
    return {**row, "responses_create_params": create}


def verdicts_task(*verdicts: dict[str, Any], text: str = "a proof") -> dict[str, Any]:
    """A task for the row-driven verifier: attempt i gets ``verdicts[i]`` (the last one after that)."""
    row = {"responses_create_params": {"input": [{"role": "user", "content": "Prove it."}]}, "verdicts": list(verdicts)}
    return scripted(row, {"text": text})


class VerdictsRequest(VerifyRequest, kw_only=True):
    verdicts: list[dict[str, Any]]
    turn_index: int = 0


class RowVerdicts(ResourcesServer):
    """A verifier whose verdicts the row dictates (by ``turn_index``); it counts the verifies of the
    session seed_session opened (a 409 when there is none) and echoes the turn index it got."""

    async def seed_session(self, session: Session, body: SeedSessionRequest) -> dict:
        self.sessions.set(session.id, {"verifies": 0})
        return {}

    async def verify(self, session: Session, body: VerdictsRequest) -> dict:
        state = self.existing_session_state(session)
        state["verifies"] += 1
        verdict = body.verdicts[min(body.turn_index, len(body.verdicts) - 1)]
        return {**verdict, "seen_turn_index": body.turn_index, "verifies_in_session": state["verifies"]}


class FailingModel(ModelServer):
    """A model server with a bug: every request is a 500."""

    async def responses(self, params: ResponseCreateParams) -> Any:
        raise RuntimeError("boom")


class HelperServers:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="row_verdicts", kind="resources", server=RowVerdicts)
        register(name="failing_model", kind="model", server=FailingModel)


RETRY = {
    "reward": 0.0,
    "needs_correction": True,
    "correction_prompt": "Fix the proof.",
    "error_feedback": "line 3: error",
}


class TestProofRefinementOnMath(AgentServerTests):
    """The kit over math's example rows, math's correction feedback on, in conversation mode: each
    row's model says nothing, then a wrong answer, then the row's conformance response; the last
    verdict must be exactly the conformance reward."""

    server_type = "proof_refinement"
    plugins = [gym_proof_refinement.plugin, gym_scripted.plugin, gym_math.plugin, HelperServers()]
    example_data = MATH_ROWS
    instances = {
        "policy": {"plugin": "scripted"},
        "fixed": {"plugin": "scripted", "turns": [{"text": "7 + 5 = 12, so \\boxed{12}."}]},
        "environment": {"plugin": "math", "correction_feedback": True, "verify_workers": 1},
        "proof_refinement": {
            "plugin": "proof_refinement",
            "model_server": "policy",
            "resources_server": "environment",
            "max_correction_turns": 2,
            "correction_input": "conversation",
        },
        "fresh": {
            "plugin": "proof_refinement",
            "model_server": "fixed",
            "resources_server": "environment",
            "max_correction_turns": 2,
        },
        "verdicts": {"plugin": "row_verdicts"},
        "judged": {
            "plugin": "proof_refinement",
            "model_server": "policy",
            "resources_server": "verdicts",
            "max_correction_turns": 2,
        },
        "single": {"plugin": "proof_refinement", "model_server": "policy", "resources_server": "verdicts"},
        "lean": {
            "plugin": "proof_refinement",
            "model_server": "policy",
            "resources_server": "verdicts",
            "max_correction_turns": 2,
            "include_all_attempts": False,
        },
        "failing": {"plugin": "failing_model"},
        "failing_agent": {
            "plugin": "proof_refinement",
            "model_server": "failing",
            "resources_server": "verdicts",
            "max_correction_turns": 2,
        },
    }
    instance = "proof_refinement"

    def run_body(self, row):
        return scripted(row, NO_ANSWER, WRONG, {"text": row["conformance"]["response"]})

    def expected_reward(self, row):
        return row["conformance"]["reward"]

    def environment_reward_range(self, servers):
        return (0.0, 1.0)

    # --- math: wrong, then corrected ---

    def test_every_attempt_is_recorded_with_its_exact_reward(self, gym_servers: RunningServers):
        for row in read_rows(MATH_ROWS):
            reward = row["conformance"]["reward"]
            result = gym_servers.caller().post("/run", self.run_body(row)).json()
            assert result["attempt_rewards"] == [0.0, 0.0, reward], row
            assert [a["reward"] for a in result["all_attempts"]] == result["attempt_rewards"]
            assert [a["turn_index"] for a in result["all_attempts"]] == [0, 1, 2]
            assert [a["proof_status"] for a in result["all_attempts"]][:2] == ["no_answer", "incorrect"]
            assert [a["generation"] for a in result["all_attempts"]] == [
                NO_ANSWER["text"],
                WRONG["text"],
                row["conformance"]["response"],
            ]
            assert (result["total_turns"], result["num_model_calls"], result["reward"]) == (3, 3, reward)
            # The result is the last verdict; the response the last attempt's.
            assert result["all_attempts"][2]["response"] == result["response"]
            assert result["needs_correction"] is (reward == 0.0)

    def test_a_right_first_answer_is_the_only_attempt(self, gym_servers: RunningServers):
        row = read_rows(MATH_ROWS)[0]
        result = gym_servers.caller().post("/run", scripted(row, {"text": "\\boxed{12}"}, WRONG)).json()
        assert (result["reward"], result["total_turns"], result["attempt_rewards"]) == (1.0, 1, [1.0])
        assert (result["proof_status"], result["needs_correction"], result["correction_prompt"]) == (
            "correct",
            False,
            None,
        )

    def test_conversation_mode_keeps_the_params_and_grows_the_conversation(self, gym_servers: RunningServers):
        row = read_rows(MATH_ROWS)[0]
        body = scripted(row, WRONG, {"text": "\\boxed{12}"}, max_output_tokens=48, instructions="Be brief.")
        result = gym_servers.caller().post("/run", body).json()
        assert result["attempt_rewards"] == [0.0, 1.0]
        first, second = result["all_attempts"]
        assert first["error_feedback"] == "Your final answer -1000 is incorrect."
        sent = second["input"]
        metadata = body["responses_create_params"]["metadata"]
        assert (sent["max_output_tokens"], sent["instructions"], sent["metadata"]) == (48, "Be brief.", metadata)
        original = row["responses_create_params"]["input"]
        assert [
            (i.get("role"), i["content"] if isinstance(i["content"], str) else i["content"][0]["text"])
            for i in sent["input"]
        ] == [
            *[(i["role"], i["content"]) for i in original],
            ("assistant", WRONG["text"]),
            ("user", first["correction_prompt"]),
        ]

    def test_a_fresh_correction_is_one_user_message_keeping_only_model_temperature_top_p(
        self, gym_servers: RunningServers
    ):
        # The row's own script answers wrong; a correction request drops the metadata that carries
        # it, so the "fixed" model answers from its config, right: wrong, then corrected.
        row = read_rows(MATH_ROWS)[0]
        body = scripted(
            row, WRONG, model="scripted", temperature=0.3, top_p=0.9, max_output_tokens=48, instructions="x"
        )
        result = gym_servers.caller("fresh").post("/run", body).json()
        assert (result["attempt_rewards"], result["total_turns"], result["reward"]) == ([0.0, 1.0], 2, 1.0)
        first, second = result["all_attempts"]
        assert second["input"] == {
            "input": [{"type": "message", "role": "user", "content": first["correction_prompt"]}],
            "model": "scripted",
            "temperature": 0.3,
            "top_p": 0.9,
        }
        assert first["input"]["max_output_tokens"] == 48  # the first attempt sends the task's params whole
        assert (first["proof_status"], second["proof_status"]) == ("incorrect", "correct")

    def test_the_correction_prompt_holds_the_problem_and_attempt_but_never_the_expected_answer(
        self, gym_servers: RunningServers
    ):
        for row in read_rows(MATH_ROWS):
            result = gym_servers.caller("fresh").post("/run", scripted(row, WRONG)).json()
            prompt = result["all_attempts"][0]["correction_prompt"]
            # The row's question when it has one, else its last user message; and the system prompt.
            question = row.get("question") or row["responses_create_params"]["input"][-1]["content"]
            assert question in prompt and WRONG["text"] in prompt
            systems = [i["content"] for i in row["responses_create_params"]["input"] if i["role"] == "system"]
            assert all(system in prompt for system in systems)
            # What remains once the problem and the model's own words are taken out: math's feedback.
            rest = prompt.replace(question, "").replace(WRONG["text"], "").replace("-1000", "")
            for item in row["responses_create_params"]["input"]:
                rest = rest.replace(item["content"], "") if item["role"] == "system" else rest
            assert str(row["expected_answer"]) not in rest, (row["expected_answer"], prompt)

    def test_math_rollouts_record_what_produced_them_and_their_usage(self, gym_servers: RunningServers):
        row = read_rows(MATH_ROWS)[0]
        result = gym_servers.caller().post("/run", scripted(row, WRONG, {"text": "\\boxed{12}"})).json()
        facts = {
            key: result[key]
            for key in (
                "agent",
                "model_server",
                "model",
                "environment",
                "resources_server",
                "num_model_calls",
                "num_tool_calls",
            )
        }
        assert facts == {
            "agent": "proof_refinement",
            "model_server": "policy",
            "model": "scripted",
            "environment": "math",
            "resources_server": "environment",
            "num_model_calls": 2,
            "num_tool_calls": 0,
        }
        per_turn = result["usage_per_turn"]
        assert per_turn == [attempt["response"]["usage"] for attempt in result["all_attempts"]]
        # The scripted model counts input items: the 6 of the row, then 6 + its answer + the correction.
        assert [u["input_tokens"] for u in per_turn] == [6, 8]
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            assert result["usage"][key] == sum(u[key] for u in per_turn)

    # --- any verifier: the stop conditions, the records, the session ---

    def test_corrections_stop_after_max_correction_turns(self, gym_servers: RunningServers):
        result = gym_servers.caller("judged").post("/run", verdicts_task(RETRY)).json()
        assert (result["total_turns"], result["num_model_calls"], result["attempt_rewards"]) == (3, 3, [0.0, 0.0, 0.0])
        # The last verdict, every field kept; each attempt was verified with its index, in one session.
        assert (result["seen_turn_index"], result["verifies_in_session"], result["needs_correction"]) == (2, 3, True)
        attempts = result["all_attempts"]
        assert [a["proof_status"] for a in attempts] == ["unknown"] * 3  # the verifier gave none
        assert [a["error_feedback"] for a in attempts] == ["line 3: error"] * 3
        for attempt in attempts[1:]:
            assert attempt["input"] == {"input": [{"type": "message", "role": "user", "content": "Fix the proof."}]}

    def test_no_correction_without_needs_correction(self, gym_servers: RunningServers):
        for verdict in (
            {"reward": 0.0, "correction_prompt": "Fix it."},
            {"reward": 0.0, "needs_correction": False, "correction_prompt": "Fix it."},
        ):
            result = gym_servers.caller("judged").post("/run", verdicts_task(verdict, RETRY)).json()
            assert (result["total_turns"], result["attempt_rewards"]) == (1, [0.0])

    def test_no_correction_without_a_correction_prompt(self, gym_servers: RunningServers):
        for prompt in ("", None):
            verdict = {**RETRY, "correction_prompt": prompt}
            result = gym_servers.caller("judged").post("/run", verdicts_task(verdict, RETRY)).json()
            assert (result["total_turns"], result["num_model_calls"], result["verifies_in_session"]) == (1, 1, 1)

    def test_max_correction_turns_zero_is_a_single_attempt(self, gym_servers: RunningServers):
        result = gym_servers.caller("single").post("/run", verdicts_task(RETRY)).json()
        assert (result["total_turns"], result["num_model_calls"], result["needs_correction"]) == (1, 1, True)

    def test_the_rewards_of_each_attempt_and_the_final_one(self, gym_servers: RunningServers):
        verdicts = [
            {**RETRY, "reward": 0.25, "proof_status": "compile_error"},
            {**RETRY, "reward": 0.5},
            {"reward": 1.0, "proof_status": "completed"},
        ]
        result = gym_servers.caller("judged").post("/run", verdicts_task(*verdicts)).json()
        assert (result["attempt_rewards"], result["reward"], result["proof_status"]) == (
            [0.25, 0.5, 1.0],
            1.0,
            "completed",
        )
        assert [a["proof_status"] for a in result["all_attempts"]] == ["compile_error", "unknown", "completed"]
        assert "needs_correction" not in result  # the last verdict as it came

    def test_include_all_attempts_false_leaves_them_out_but_keeps_the_rewards(self, gym_servers: RunningServers):
        result = gym_servers.caller("lean").post("/run", verdicts_task(RETRY, {"reward": 1.0})).json()
        assert (result["all_attempts"], result["attempt_rewards"], result["total_turns"]) == (None, [0.0, 1.0], 2)

    def test_every_rollout_closes_its_session(self, gym_servers: RunningServers):
        verifier = gym_servers.servers["verdicts"]
        for agent in ("judged", "single", "lean"):
            assert gym_servers.caller(agent).post("/run", verdicts_task(RETRY)).status == 200
        assert len(verifier.sessions) == 0

    def test_a_verify_that_refuses_the_row_fails_the_rollout_and_closes_its_session(self, gym_servers: RunningServers):
        row = verdicts_task(RETRY)
        del row["verdicts"]  # the verifier needs them: a 422 from /verify
        reply = gym_servers.caller("judged").post("/run", row)
        assert reply.status == 424, reply.text
        assert reply.json()["error"]["type"] == "validation_error"
        assert len(gym_servers.servers["verdicts"].sessions) == 0

    def test_a_model_server_failure_fails_the_rollout_retryably_and_closes_its_session(
        self, gym_servers: RunningServers
    ):
        reply = gym_servers.caller("failing_agent").post("/run", verdicts_task(RETRY))
        assert reply.status == 502, reply.text  # retryable: the collector tries the rollout again
        assert "failing /v1/responses" in reply.json()["error"]["message"]
        assert len(gym_servers.servers["verdicts"].sessions) == 0

    def test_responses_is_one_model_call_with_string_input_as_one_message(self, gym_servers: RunningServers):
        script = json.dumps([{"text": "hello"}])
        response = (
            gym_servers.caller()
            .post("/v1/responses", {"input": "three words here", "metadata": {"scripted_turns": script}})
            .json()
        )
        assert [part["text"] for item in response["output"] for part in item["content"]] == ["hello"]
        assert response["usage"]["input_tokens"] == 1  # the scripted model counts a list's items: one message


def test_skip_verification_is_ignored_as_in_the_reference():
    manager = plugin_manager(gym_proof_refinement.plugin, gym_scripted.plugin, HelperServers())
    config = {
        "policy": {"plugin": "scripted"},
        "verdicts": {"plugin": "row_verdicts"},
        "agent": {
            "plugin": "proof_refinement",
            "model_server": "policy",
            "resources_server": "verdicts",
            "skip_verification": True,
            "skip_verification_reward": 0.5,
        },
    }
    with running_servers(config, plugins=manager) as global_config:
        result = HTTPCaller(global_config.instances["agent"].url).post("/run", verdicts_task({"reward": 0.0})).json()
    assert (result["reward"], result["verifies_in_session"]) == (0.0, 1)


def test_the_example_config_corrects_a_wrong_answer():
    manager = plugin_manager(gym_proof_refinement.plugin, gym_scripted.plugin, gym_math.plugin)
    row = read_rows(MATH_ROWS)[0]
    # Fresh correction turns drop the row's script: the scripted model's default line is no answer.
    with running_servers(
        yaml.safe_load((CONFIGS / "proof_refinement.yaml").read_text()), plugins=manager
    ) as global_config:
        result = HTTPCaller(global_config.instances["agent"].url).post("/run", scripted(row, WRONG)).json()
    assert result["attempt_rewards"] == [0.0, 0.0, 0.0]
    assert [a["proof_status"] for a in result["all_attempts"]] == ["incorrect", "no_answer", "no_answer"]


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_is_valid_and_pairs_the_agent_with_math_giving_feedback(path: Path):
    from gym_core import get_plugin_manager

    manager = get_plugin_manager()
    overrides = ["policy_model.base_url=http://127.0.0.1:9/v1", "policy_model.model=m"] if "openai" in path.name else []
    config = load_config([path], overrides, env_file=None, server_types=manager.servers(), allocate_ports=False)
    agents = [i for i in config.instances.values() if i.plugin == "proof_refinement"]
    assert len(agents) == 1 and agents[0].options["max_correction_turns"] >= 1
    environment = config.instances[agents[0].options["resources_server"]]
    assert environment.plugin == "math" and environment.options["correction_feedback"] is True
