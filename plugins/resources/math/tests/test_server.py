"""The math resources server over real HTTP (gym's conformance kit, then its verdicts in both
grading modes, its row and option checks), its configs, and its metrics."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_core import PluginManager
from gym_core.errors import ConfigError
from gym_core.testing import (
    HTTPCaller,
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    running_servers,
)

import gym_math.plugin
from gym_math.config import MathConfig
from gym_math.plugin import math_metrics

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
PROMPT = {"input": [{"role": "user", "content": "q"}]}


def body(text: str, expected, **fields) -> dict:
    return {
        "responses_create_params": PROMPT,
        "expected_answer": expected,
        **fields,
        "response": assistant_response(text),
    }


class TestMath(ResourcesServerTests):
    server_type = "math"
    plugins = [gym_math.plugin]
    example_data = EXAMPLES
    # A short hard limit, so that the timeout test is quick (normal rows take milliseconds).
    options = {"library_verifier_timeout_seconds": 2.0, "verify_workers": 2}
    # Each example row's `conformance` field (which math ignores) holds the response the kit sends
    # and the reward it must get in the default (library) mode.

    def test_verify_reports_the_math_with_judge_fields(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        right = caller.post("/verify", body("so \\boxed{\\frac{1}{2}}", "0.5", question="Half of 1?")).json()
        assert right == {
            "reward": 1.0,
            "expected_answer": "0.5",
            "extracted_answer": "1/2",
            "library_reward": 1.0,
            "judge_evaluations": None,
            "reason": "correct",
        }
        wrong = caller.post("/verify", body("\\boxed{3}", 4)).json()
        assert (wrong["reward"], wrong["library_reward"], wrong["extracted_answer"]) == (0.0, 0.0, "3")
        assert wrong["expected_answer"] == 4  # echoed as the row has it

    def test_an_unparseable_answer_scores_zero_with_null_extracted_answer(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/verify", body("I have no idea.", "4"))
        assert reply.status == 200
        assert reply.json() == {
            "reward": 0.0,
            "expected_answer": "4",
            "extracted_answer": None,
            "library_reward": 0.0,
            "judge_evaluations": None,
            "reason": "no_answer",
        }

    def test_the_whole_output_text_is_graded(self, gym_servers: RunningServers):
        # OUTPUT_TEXT: every output_text part of every message, concatenated; reasoning is not graded.
        response = {
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "maybe \\boxed{5}"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The final "}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "answer is 7"}]},
            ]
        }
        verdict = gym_servers.caller().post("/verify", {**body("", "7"), "response": response}).json()
        assert (verdict["reward"], verdict["extracted_answer"]) == (1.0, "7")

    def test_rows_in_the_reference_format_are_accepted_nulls_included(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        for question in ("What is 2 + 2?", None):
            row = {**body("\\boxed{4}", "4", question=question), "uuid": "x", "metadata": None}
            assert caller.post("/verify", row).json()["reward"] == 1.0

    @pytest.mark.parametrize("change", [{"expected_answer": None}, {"expected_answer": [4]}, {"question": 4}])
    def test_bad_row_fields_are_a_422_naming_the_field(self, gym_servers: RunningServers, change):
        reply = gym_servers.caller().post("/verify", {**body("\\boxed{4}", "4"), **change})
        assert reply.status == 422, reply.text
        assert next(iter(change)) in reply.json()["error"]["message"]

    def test_a_pathological_answer_times_out_with_reward_zero_and_null_answer(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        stuck = caller.post("/verify", body("\\boxed{(10^{10})!}", "5")).json()
        assert (stuck["reward"], stuck["extracted_answer"], stuck["library_reward"], stuck["reason"]) == (
            0.0,
            None,
            0.0,
            "timeout",
        )
        assert caller.post("/verify", body("\\boxed{5}", "5")).json()["reward"] == 1.0  # the worker was replaced

    def test_a_missing_expected_answer_is_a_422_naming_it(self, gym_servers: RunningServers):
        row = body("\\boxed{4}", "4")
        del row["expected_answer"]
        reply = gym_servers.caller().post("/verify", row)
        assert reply.status == 422 and "expected_answer" in reply.json()["error"]["message"]


@pytest.fixture(scope="module")
def boxed_server():
    """A math server in boxed mode, with a short time limit."""
    config = {"math": {"plugin": "math", "grading_mode": "boxed", "verify_timeout_s": 1.0, "verify_workers": 1}}
    with running_servers(config, plugins=plugin_manager(gym_math.plugin)) as running:
        yield HTTPCaller(running.instances["math"].url)


def test_boxed_mode_grades_the_last_box_only(boxed_server):
    boxed, unboxed, two = (
        boxed_server.post("/verify", b).json()
        for b in (
            body("so \\boxed{\\frac{1}{2}}", "0.5"),
            body("The final answer is 12", "12"),
            body("\\boxed{1} then \\boxed{2}", "2"),
        )
    )
    assert boxed == {
        "reward": 1.0,
        "expected_answer": "0.5",
        "extracted_answer": "\\frac{1}{2}",
        "library_reward": 1.0,
        "judge_evaluations": None,
        "reason": "correct",
    }
    assert (unboxed["reward"], unboxed["extracted_answer"], unboxed["reason"]) == (0.0, None, "no_boxed_answer")
    assert (two["reward"], two["extracted_answer"]) == (1.0, "2")


def test_boxed_mode_times_out_a_pathological_answer(boxed_server):
    stuck = boxed_server.post("/verify", body("\\boxed{(10^{10})!}", "5")).json()
    assert (stuck["reward"], stuck["extracted_answer"], stuck["reason"]) == (0.0, "(10^{10})!", "timeout")
    assert boxed_server.post("/verify", body("\\boxed{5.0}", "5")).json()["reward"] == 1.0  # worker replaced


def load(options: dict):
    from gym_core.config import load_config

    raw = {"math": {"plugin": "math", **options}}
    config = load_config([], [], env_file=None, base=raw, server_types=plugin_manager(gym_math.plugin).servers())
    return config.instances["math"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"should_use_judge": True}, "should_use_judge: true needs judge_model_server"),
        ({"verify_timeout_s": 3, "library_verifier_timeout_seconds": 4}, "name the same limit"),
        ({"grading_mode": "judge"}, "grading_mode"),
        ({"library_verifier_max_concurrency": 0}, "library_verifier_max_concurrency"),
    ],
)
def test_bad_options_are_config_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        load(options)


def test_the_reference_options_are_accepted():
    # judge_model_server is an instance name (the reference's {type, name} form is not accepted);
    # the judge itself is tested in test_judge_fallback.py.
    options = {
        "should_use_judge": False,
        "judge_responses_create_params": {"input": [], "max_output_tokens": 512},
        "library_verifier_timeout_seconds": 7.0,
        "library_verifier_max_concurrency": 32,
    }
    load(options)  # no error
    assert MathConfig(**options).timeout_s == 7.0
    assert MathConfig(verify_timeout_s=2.0, library_verifier_timeout_seconds=2.0).timeout_s == 2.0
    assert (MathConfig().timeout_s, MathConfig(grading_mode="boxed").timeout_s) == (10.0, 5.0)


@pytest.mark.parametrize("name", ["math.yaml", "math_local.yaml", "math_judge_local.yaml"])
def test_configs_validate(name):
    from gym_core.config import load_config

    manager = plugin_manager(gym_math.plugin, *first_party("simple_agent", "local_llama", "openai_model"))
    overrides = ["policy_model.base_url=http://127.0.0.1:1/v1", "policy_model.model=m"] if name == "math.yaml" else []
    config = load_config([PACKAGE / "configs" / name], overrides, env_file=None, server_types=manager.servers())
    assert config.instances["math"].plugin == "math"
    if name == "math_judge_local.yaml":  # local_llama is the policy and, as the same instance, the judge
        options = config.instances["math"].options
        assert options["should_use_judge"] is True and options["judge_model_server"] == "policy_model"
        assert config.instances["policy_model"].plugin == "local_llama"


# ---------------------------------------------------------------- metrics


def rollout(task: int, index: int, reward: float, answer):
    return {
        "environment": "math",
        "task_index": task,
        "rollout_index": index,
        "reward": reward,
        "library_reward": reward,
        "extracted_answer": answer,
        "judge_evaluations": None,
    }


def test_metrics_follow_the_pass_at_k_helper():
    rows = [
        rollout(0, 0, 1.0, "4"),
        rollout(0, 1, 0.0, "5"),
        rollout(1, 0, 0.0, None),
        rollout(1, 1, 0.0, "7"),
    ]
    m = math_metrics(rows)
    assert m["math/pass@1/symbolic_accuracy"] == pytest.approx(25.0)  # task 0: 1/2, task 1: 0
    assert m["math/pass@2/symbolic_accuracy"] == pytest.approx(50.0)
    assert m["math/pass@1[avg-of-2]/symbolic_accuracy"] == pytest.approx(25.0)
    assert m["math/pass@1[avg-of-1]/symbolic_accuracy"] == pytest.approx(50.0)  # first rollouts: 1 and 0
    # majority@2: task 0 ties ("4", 1) and ("5", 0) -> 0.5; task 1 has only ("7", 0) -> 0.
    assert m["math/majority@2/symbolic_accuracy"] == pytest.approx(25.0)
    assert m["math/pass@1[avg-of-2]/no_answer"] == pytest.approx(25.0)
    # Per-run accuracies 50 and 0: sample std 35.36, std err 25.
    assert m["math/pass@1[avg-of-2]/symbolic_accuracy/std_dev_across_runs"] == pytest.approx(35.355, abs=1e-3)
    assert m["math/pass@1[avg-of-2]/symbolic_accuracy/std_err_across_runs"] == pytest.approx(25.0)


def test_aggregate_metrics_count_math_rows_only():
    plugins = PluginManager(load_entry_points=False)
    plugins.register(gym_math.plugin, name="math")
    rows = [
        rollout(0, 0, 1.0, "4"),
        rollout(1, 0, 0.0, None),
        {"environment": "counter", "reward": 1.0, "final_count": 3},
    ]
    metrics = plugins.aggregate_metrics(rows)
    assert metrics["math/boxed_answer_rate"] == 0.5
    assert metrics["math/pass@1/symbolic_accuracy"] == 50.0
    assert plugins.aggregate_metrics([{"environment": "counter", "reward": 1.0}]) == {}
