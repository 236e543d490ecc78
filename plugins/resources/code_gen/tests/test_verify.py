"""Unit tests of code_gen's pure functions (gym_code_gen.verify), of the sandbox-side runner's
program transformation and prelude (gym_code_gen.runner, imported here as a module), and of the
aggregate metrics: one group per rule of the spec (§9)."""

from __future__ import annotations

import ast

import msgspec
import pytest

from gym_core.sandbox import Sandbox, SandboxError
from gym_core.schemas import Response
from gym_core.testing import assistant_response

from gym_code_gen import runner
from gym_code_gen.plugin import code_gen_metrics, gym_aggregate_metrics
from gym_code_gen.verify import (
    call_result_matches,
    extract_code,
    global_deadline_s,
    read_verdicts,
    reasoning_format_violation,
    stdout_matches,
    truncate,
)


def response(data: dict) -> Response:
    return msgspec.convert(data, Response)


# --- extraction -------------------------------------------------------------------------------------


def test_code_is_between_the_second_to_last_and_last_fence_lines():
    text = "Try:\n```python\nprint(1)\n```\nBetter:\n```py\nx = 2\nprint(x)\n```\nDone."
    assert extract_code(text) == "x = 2\nprint(x)"


def test_a_fence_anywhere_in_a_line_counts_and_the_tag_does_not_matter():
    assert extract_code("code: ```\nprint(3)\nend ``` here") == "print(3)"
    assert extract_code("```cpp\nint main(){}\n```") == "int main(){}"


def test_fewer_than_two_fence_lines_is_no_code():
    assert extract_code("print(1)") is None
    assert extract_code("```python\nprint(1)") is None
    assert extract_code("") is None


def test_an_odd_number_of_fences_takes_the_last_two():
    # The reference's rule, not pairing from the start: an unclosed first fence shifts the pair.
    assert extract_code("```\na\n```\nb\n```") == "b"


# --- reasoning format -------------------------------------------------------------------------------


def test_think_tags_in_the_output_text_are_a_violation():
    assert reasoning_format_violation(response(assistant_response("<think>x</think> ```\n```")))
    assert reasoning_format_violation(response(assistant_response("stray </think>")))
    assert not reasoning_format_violation(response(assistant_response("<thinking> is not the tag")))


def test_more_than_one_think_tag_in_the_reasoning_summaries_is_a_violation():
    def with_reasoning(*texts: str) -> Response:
        summary = [{"type": "summary_text", "text": t} for t in texts]
        return response(
            {"output": [{"type": "reasoning", "id": "r", "summary": summary}, *assistant_response("fine")["output"]]}
        )

    assert not reasoning_format_violation(with_reasoning("<think>one</think>"))
    assert reasoning_format_violation(with_reasoning("<think>a", "<think>b"))  # concatenated summaries
    assert reasoning_format_violation(with_reasoning("a</think>", "b</think>"))


# --- standard-input comparison ----------------------------------------------------------------------


def test_lines_are_stripped_and_whole_texts_stripped():
    assert stdout_matches("  1 2 \n3\n\n\n", "1 2\n  3  ")
    assert stdout_matches("\n\nyes\n", "yes")


def test_different_line_counts_fail():
    assert not stdout_matches("1\n2\n", "1 2\n")
    assert not stdout_matches("1\n\n2", "1\n2")  # an inner blank line counts


def test_numbers_compare_as_arbitrary_precision_decimals():
    assert stdout_matches("1.0 1e3 0.50", "1 1000 0.5")
    assert stdout_matches("123456789012345678901234567890.0", "123456789012345678901234567890")
    # Not floats: these differ beyond double precision and must not compare equal.
    assert not stdout_matches("0.10000000000000000001", "0.1")
    assert not stdout_matches("1 2", "1 2 3")
    assert not stdout_matches("1.5", "1.50001")


def test_a_line_that_is_not_all_numbers_compares_as_text():
    assert not stdout_matches("YES 1", "yes 1")
    assert not stdout_matches("1 x", "1.0 x")
    assert not stdout_matches("nan", "NaN")  # NaN is never equal to itself
    assert stdout_matches("sNaN", "sNaN")
    assert not stdout_matches("sNaN", "snan")  # a signalling NaN compares by raising: not equal


# --- function-call comparison -----------------------------------------------------------------------


def test_call_results_compare_equal_json_or_close_floats():
    assert call_result_matches([1, 2], [1, 2])
    assert call_result_matches(True, 1)  # Python equality, as in the reference
    assert call_result_matches(0.30000000000000004, 0.3)
    assert call_result_matches([1.0, 2.000001], [1, 2])
    assert call_result_matches("1.5", 1.5)  # both convert to floats
    assert call_result_matches(float("inf"), float("inf"))
    assert call_result_matches(float("nan"), float("nan"))  # both serialise to NaN
    assert not call_result_matches(float("nan"), 1.0)
    assert not call_result_matches([float("nan")], [1.0])
    assert not call_result_matches(1.001, 1.0)
    assert not call_result_matches([1, 2], [1, 2, 3])
    assert not call_result_matches([[1, 2]], [1, 2])
    assert not call_result_matches("abc", "abd")
    assert not call_result_matches({"a": 1}, {"a": 2})
    assert not call_result_matches(10**400, 1e308)  # too big for a float: not close, not an error


def test_allclose_tolerance_is_relative_to_the_expected_value():
    assert call_result_matches(100.0009, 100.0)  # within 1e-8 + 1e-5 * 100
    assert not call_result_matches(100.0011, 100.0)
    assert call_result_matches(1e-9, 0.0)
    assert not call_result_matches(2e-8, 0.0)


# --- deadline and driver frames ---------------------------------------------------------------------


def test_the_global_deadline_is_the_references():
    assert global_deadline_s(10, 3) == 38
    assert global_deadline_s(1, 1) == 7


def test_only_verdicts_with_the_nonce_count():
    nonce = "ab" * 16
    stdout = (
        f'{nonce} 0 {{"code": true}}\nfake 1 {{"code": true}}\n{nonce}x 1 {{"code": true}}\n'
        f'{nonce} 1 {{"code": -2, "output": "4"}}\n{nonce} done\n'
    ).encode()
    verdicts, done = read_verdicts(stdout, nonce)
    assert verdicts == {0: {"code": True}, 1: {"code": -2, "output": "4"}} and done
    assert read_verdicts(b'0 {"code": true}\n', nonce) == ({}, False)
    with pytest.raises(ValueError, match="malformed"):
        read_verdicts(f'{nonce} 0 {{"code": true}}\n{nonce} 0 {{"code": true}}\n'.encode(), nonce)
    with pytest.raises(ValueError):
        read_verdicts(f"{nonce} 0 not json\n".encode(), nonce)


def test_truncate_marks_what_it_cut():
    assert truncate("abc", 5) == "abc"
    assert truncate("abcdefgh", 3) == "abc...(truncated 5 chars)"


# --- the runner: prelude and the reference's program transformation ---------------------------------


def test_the_prelude_star_imports_the_modules_and_raises_the_recursion_limit():
    namespace: dict = {}
    limit = __import__("sys").getrecursionlimit()
    try:
        exec(runner.PRELUDE, namespace)
        assert __import__("sys").getrecursionlimit() == 50000
    finally:
        __import__("sys").setrecursionlimit(limit)
    assert {"deque", "heappush", "bisect_left", "gcd", "accumulate", "lru_cache", "List", "json", "itertools"} <= set(
        namespace
    )
    assert namespace["compile"] is compile  # `from builtins import *` comes after `from re import *`
    assert namespace["pow"] is pow


def test_wrap_keeps_imports_and_wraps_every_other_statement():
    tree = runner.wrap("import os\nx = 1\nfrom math import gcd\nprint(x)\n")
    module = ast.unparse(tree)
    assert module.splitlines()[:2] == ["import os", "from math import gcd"]
    assert "def wrapped_function():\n    x = 1\n    print(x)" in module


def test_wrap_unwraps_a_final_main_guard_only():
    final = ast.unparse(runner.wrap("def f():\n    return 1\nif __name__ == '__main__':\n    print(f())\n"))
    assert "__name__" not in final and "    print(f())" in final
    inner = ast.unparse(runner.wrap("if __name__ == '__main__':\n    print(1)\nprint(2)\n"))
    assert "if __name__ == '__main__':" in inner  # not last: wrapped as it is (false when run)


def test_wrap_returns_a_source_that_does_not_parse_unchanged():
    assert runner.wrap("def (:\n") == "def (:\n"


# --- the sandbox's own failure ----------------------------------------------------------------------


async def test_running_in_a_sandbox_that_was_not_started_is_a_sandbox_error():
    with pytest.raises(SandboxError):
        await Sandbox("unsandboxed").run_python("print(1)")


# --- aggregate metrics ------------------------------------------------------------------------------


def rollout(
    task: int, index: int, reward: float, code: str | None, difficulty: str | None, violation: float = 0.0
) -> dict:
    return {
        "task_index": task,
        "rollout_index": index,
        "reward": reward,
        "extracted_model_code": code,
        "difficulty": difficulty,
        "reasoning_format_violation_rate": violation,
    }


def test_metrics_are_the_pass_at_k_family_with_difficulty_subsets():
    rows = [
        rollout(0, 0, 1.0, "a", "easy"),
        rollout(0, 1, 0.0, "b", "easy"),
        rollout(1, 0, 0.0, None, "hard", 1.0),
        rollout(1, 1, 0.0, "c", "hard"),
    ]
    metrics = code_gen_metrics(rows)
    assert metrics["code_gen/pass@1[avg-of-2]/accuracy"] == 25.0
    assert metrics["code_gen/pass@2/accuracy"] == 50.0
    assert metrics["code_gen/pass@2/no_answer"] == 50.0
    assert metrics["code_gen/easy/pass@1[avg-of-2]/accuracy"] == 50.0
    assert metrics["code_gen/hard/pass@2/accuracy"] == 0.0
    # Task 0 scores 1, 0 (sample std 0.7071...), task 1 scores 0, 0.
    assert metrics["code_gen/pass@1[avg-of-2]/accuracy/avg_sample_std_dev"] == pytest.approx(100 * 0.70710678 / 2)
    assert metrics["code_gen/reasoning_format_violation_rate"] == 0.25
    assert gym_aggregate_metrics([]) is None


def test_accuracy_is_a_positive_reward():
    # A negative reasoning-format penalty is not a pass, nor is 0.
    rows = [rollout(0, 0, -0.5, "a", None), rollout(1, 0, 0.5, "b", None)]
    assert code_gen_metrics(rows)["code_gen/pass@1/accuracy"] == 50.0
    assert not any(name.startswith("code_gen/None") for name in code_gen_metrics(rows))
