"""math's correction feedback (option ``correction_feedback``), over real HTTP: what a
self-correcting agent reads from a verdict, in both grading modes; and that it never gives the
expected answer away. Off (the default), verdicts are unchanged (see test_server.py)."""

from __future__ import annotations

import pytest

from gym_core.schemas import decode_create_params
from gym_core.testing import HTTPCaller, assistant_response, plugin_manager, running_servers

import gym_math.plugin
from gym_math.server import correction_feedback

FEW_SHOT = {
    "input": [
        {"role": "system", "content": "Solve the problem. Put the final answer in \\boxed{}."},
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "\\boxed{2}"},
        {"role": "user", "content": "What is 7 + 5?"},
    ]
}
FEEDBACK_FIELDS = ("proof_status", "needs_correction", "error_feedback", "correction_prompt")


def body(text: str, expected="12", params=FEW_SHOT, **fields) -> dict:
    return {
        "responses_create_params": params,
        "expected_answer": expected,
        **fields,
        "response": assistant_response(text),
    }


@pytest.fixture(scope="module")
def servers():
    """math with feedback in both grading modes, and without."""
    config = {
        "library": {"plugin": "math", "correction_feedback": True, "verify_workers": 1},
        "boxed": {"plugin": "math", "correction_feedback": True, "grading_mode": "boxed", "verify_workers": 1},
        "plain": {"plugin": "math", "verify_workers": 1},
    }
    with running_servers(config, plugins=plugin_manager(gym_math.plugin)) as running:
        yield {name: HTTPCaller(running.instances[name].url) for name in config}


def test_a_right_answer_needs_no_correction(servers):
    verdict = servers["library"].post("/verify", body("7 + 5 = \\boxed{12}")).json()
    assert verdict == {
        "reward": 1.0,
        "expected_answer": "12",
        "extracted_answer": "12",
        "library_reward": 1.0,
        "judge_evaluations": None,
        "reason": "correct",
        "proof_status": "correct",
        "needs_correction": False,
        "error_feedback": None,
        "correction_prompt": None,
    }


def test_a_wrong_answer_is_offered_a_correction_naming_the_models_answer_only(servers):
    verdict = servers["library"].post("/verify", body("7 + 5 = \\boxed{13}")).json()
    assert (verdict["reward"], verdict["proof_status"], verdict["needs_correction"]) == (0.0, "incorrect", True)
    assert verdict["error_feedback"] == "Your final answer 13 is incorrect."
    assert verdict["correction_prompt"] == (
        "Solve the problem. Put the final answer in \\boxed{}.\n\nWhat is 7 + 5?\n\n"
        "Your previous attempt:\n7 + 5 = \\boxed{13}\n\n"
        "Your final answer 13 is incorrect. Solve the problem again and put your final answer in \\boxed{}."
    )


def test_no_answer_is_offered_a_correction(servers):
    library = servers["library"].post("/verify", body("I am not sure.")).json()
    boxed = servers["boxed"].post("/verify", body("The answer is 12")).json()
    assert (library["proof_status"], library["error_feedback"]) == (
        "no_answer",
        "No final answer was found in your response.",
    )
    assert (boxed["proof_status"], boxed["error_feedback"]) == (
        "no_answer",
        "No final answer in \\boxed{} was found in your response.",
    )
    assert library["needs_correction"] and boxed["needs_correction"]
    assert "Your previous attempt:\nI am not sure." in library["correction_prompt"]
    empty = servers["library"].post("/verify", body("")).json()
    assert "Your previous attempt:\n(empty)" in empty["correction_prompt"]


def test_a_task_the_grader_cannot_read_is_not_retried(servers):
    verdict = servers["library"].post("/verify", body("\\boxed{12}", expected="$")).json()
    assert (verdict["reason"], verdict["proof_status"], verdict["needs_correction"]) == (
        "unparseable_expected_answer",
        "error",
        False,
    )
    assert verdict["correction_prompt"] is None


def test_the_question_field_and_string_input_give_the_problem(servers):
    with_question = servers["library"].post("/verify", body("\\boxed{1}", question="What is 7 + 5, exactly?")).json()
    assert with_question["correction_prompt"].startswith(
        "Solve the problem. Put the final answer in \\boxed{}.\n\nWhat is 7 + 5, exactly?\n\nYour previous attempt:"
    )
    string_input = (
        servers["library"]
        .post("/verify", body("\\boxed{1}", params={"input": "Add 7 and 5.", "instructions": "x"}))
        .json()
    )
    assert string_input["correction_prompt"].startswith("Add 7 and 5.\n\nYour previous attempt:")


@pytest.mark.parametrize("expected", ["12", "\\frac{1}{2}", "99", "$\\frac{3}{4}$"])
def test_the_feedback_never_holds_the_expected_answer(servers, expected):
    params = {"input": [{"role": "user", "content": "Compute it."}]}
    for grader in ("library", "boxed"):
        for text in ("\\boxed{-7}", "no idea", "\\boxed{x+y}"):
            verdict = servers[grader].post("/verify", body(text, expected=expected, params=params)).json()
            assert verdict["needs_correction"] is True
            feedback = verdict["error_feedback"] + verdict["correction_prompt"]
            assert expected.strip("$") not in feedback, (grader, text, verdict)


def test_without_the_option_verdicts_carry_no_feedback(servers):
    verdict = servers["plain"].post("/verify", body("\\boxed{13}")).json()
    assert not set(FEEDBACK_FIELDS) & set(verdict)


def test_an_answer_past_the_time_limit_may_be_corrected():
    params = decode_create_params({"input": "q"})
    feedback = correction_feedback("timeout", None, "\\boxed{(10^{10})!}", params, None)
    assert (feedback["proof_status"], feedback["needs_correction"]) == ("incorrect", True)
    assert feedback["error_feedback"].startswith("Your answer could not be checked within the time limit")
    assert correction_feedback("error", None, "x", params, None)["needs_correction"] is False
