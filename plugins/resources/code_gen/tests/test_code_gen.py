"""Tests of the code_gen plugin over real HTTP, servers on loopback, programs in gym's real sandbox:
gym's conformance kit for a resources server, then each result code and rule of the spec (§9),
hostile programs (endless loops, endless output, forks, forged results), bad rows, and the
sandbox's own failure (502 ``sandbox_failed``).

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. Time limits are small (1 s per test) to keep the suite quick.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_core import ServerClient, hookimpl
from gym_core.sandbox import Sandbox
from gym_core.testing import (
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_code_gen.plugin
from gym_code_gen.config import CodeGenConfig
from gym_code_gen.server import CodeGenServer

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"

FAST = {"unit_test_timeout_secs": 1, "num_processes": 4, "output_limit_mb": 1}

SUM = {"inputs": ["1 2\n", "10 -3\n", "5 5\n"], "outputs": ["3\n", "7\n", "10\n"], "fn_name": None}
PROFIT = {"inputs": ["[7, 1, 5, 3, 6, 4]", "[7, 6, 4, 3, 1]"], "outputs": ["5", "0"], "fn_name": "maxProfit"}


class UnstartedSandboxServer(CodeGenServer):
    """A code_gen server whose sandbox is never started: every run is the sandbox's own failure."""

    async def startup(self) -> None:
        await super().startup()
        self.sandbox = Sandbox(self.config.sandbox_mode, max_concurrency=self.config.num_processes)


class TinyDeadlineServer(CodeGenServer):
    """A code_gen server whose global deadline is 0.3 s of running time, to reach -1 quickly."""

    def deadline_s(self, tests: int) -> float:
        return 0.3


class HelperServers:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="code_gen_unstarted", kind="resources", server=UnstartedSandboxServer, config=CodeGenConfig)
        register(name="code_gen_tiny_deadline", kind="resources", server=TinyDeadlineServer, config=CodeGenConfig)


def fenced(code: str, before: str = "Solution:\n") -> str:
    return f"{before}```python\n{code}\n```\n"


def task(tests: dict[str, Any], difficulty: str | None = "easy", **extra: Any) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": "Solve it."},
        "verifier_metadata": {"unit_tests": tests, "difficulty": difficulty},
        **extra,
    }


class TestCodeGen(ResourcesServerTests):
    instances = {
        "code_gen": {"plugin": "code_gen", **FAST},
        "plain": {"plugin": "code_gen", **FAST, "reference_stdin": False},
        "penalised": {"plugin": "code_gen", **FAST, "reasoning_format_penalty": -0.5},
        "debugging": {"plugin": "code_gen", **FAST, "debug": True},
        "unstarted": {"plugin": "code_gen_unstarted", **FAST},
        "tiny_deadline": {"plugin": "code_gen_tiny_deadline", **FAST},
    }
    instance = "code_gen"
    plugins = [gym_code_gen.plugin, HelperServers()]
    example_data = EXAMPLES
    # Each example row's `conformance` field (which code_gen ignores) holds the response the kit
    # sends and the reward it must get.

    def verify(self, servers: RunningServers, row: dict, text: str | dict, instance: str | None = None) -> dict:
        response = text if isinstance(text, dict) else assistant_response(text)
        reply = servers.caller(instance).post("/verify", {**row, "response": response})
        assert reply.status == 200, reply.text[:2000]
        return reply.json()

    # --- verdicts and fields -----------------------------------------------------------------------

    def test_a_correct_stdin_program_passes_every_test(self, gym_servers: RunningServers):
        code = "a, b = map(int, input().split())\nprint(a + b)"
        verdict = self.verify(gym_servers, task(SUM), fenced(code))
        assert verdict["reward"] == 1.0
        assert verdict["result"] == [True, True, True]
        assert verdict["extracted_model_code"] == code
        assert verdict["extracted_model_output"] == fenced(code)
        assert set(verdict["metadata"]) == {"execution time"}
        assert verdict["reasoning_format_violation_rate"] == 0.0 and verdict["difficulty"] == "easy"
        assert isinstance(verdict["unit_tests_time_taken"], float)

    def test_results_stop_at_the_first_failure_in_test_order(self, gym_servers: RunningServers):
        # Right on the first test only: the result is [True, -2], whatever the runs' finishing order.
        code = "a, b = map(int, input().split())\nprint(3)"
        verdict = self.verify(gym_servers, task(SUM), fenced(code))
        assert (verdict["reward"], verdict["result"]) == (0.0, [True, -2])
        assert verdict["metadata"]["error_code"] == -2
        assert verdict["metadata"]["inputs"] == "10 -3\n" and verdict["metadata"]["expected"] == "7\n"
        assert verdict["metadata"]["output"] == "3\n"

    def test_a_later_failure_is_reported_after_earlier_passes(self, gym_servers: RunningServers):
        # The third test crashes (a zero divisor), after two that pass; a slow earlier test is awaited.
        tests = {"inputs": ["2\n", "1\n", "0\n"], "outputs": ["0.5\n", "1\n", "0\n"], "fn_name": None}
        code = "import time\nn = int(input())\nif n == 2: time.sleep(0.3)\nprint(1 / n)"
        verdict = self.verify(gym_servers, task(tests), fenced(code))
        assert verdict["result"] == [True, True, -4]
        assert "ZeroDivisionError" in verdict["metadata"]["traceback"]

    def test_a_wrong_number_of_lines_is_a_wrong_answer(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM), fenced("print(3)\nprint()\nprint(4)"))
        assert verdict["result"] == [-2]

    def test_decimal_outputs_compare_as_numbers(self, gym_servers: RunningServers):
        tests = {"inputs": [""], "outputs": ["0.5 1000\n"], "fn_name": None}
        assert self.verify(gym_servers, task(tests), fenced("print('0.50', '1e3')"))["reward"] == 1.0

    def test_a_runtime_error_is_minus_four(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM), fenced("print(undefined_name)"))
        assert (verdict["reward"], verdict["result"]) == (0.0, [-4])
        assert "NameError" in verdict["metadata"]["traceback"]

    def test_debug_keeps_more_of_the_programs_stderr(self, gym_servers: RunningServers):
        code = "import sys\nsys.stderr.write('start' + 'x' * 5000)\nraise ValueError('boom')"
        short = self.verify(gym_servers, task(SUM), fenced(code))["metadata"]["traceback"]
        full = self.verify(gym_servers, task(SUM), fenced(code), instance="debugging")["metadata"]["traceback"]
        assert len(short) == 2000 and short.endswith("ValueError: boom\n")
        assert full.startswith("start") and full.endswith("ValueError: boom\n")

    def test_a_syntax_error_is_minus_four(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM), fenced("def broken(:\n    pass"))
        assert verdict["result"] == [-4]
        assert "SyntaxError" in verdict["metadata"]["traceback"]

    def test_system_exit_is_swallowed_and_the_output_so_far_compared(self, gym_servers: RunningServers):
        code = "import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(1)\nprint('never')"
        assert self.verify(gym_servers, task(SUM), fenced(code))["reward"] == 1.0

    def test_an_endless_loop_is_a_time_limit(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM), fenced("while True:\n    pass"))
        assert (verdict["reward"], verdict["result"]) == (0.0, [-3])
        assert verdict["metadata"]["error_message"] == "Time Limit Exceeded"

    def test_endless_output_is_stopped(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM), fenced("while True:\n    print('spam' * 1000)"))
        assert verdict["result"] == [-3]
        assert verdict["metadata"]["stopped_by"] == "output_limit"

    def test_a_fork_bomb_fails_and_leaves_nothing_behind(self, gym_servers: RunningServers):
        code = "import os\nwhile True:\n    os.fork()"
        verdict = self.verify(gym_servers, task(SUM), fenced(code))
        assert verdict["reward"] == 0.0 and verdict["result"][0] in (-3, -4)
        # The server still runs programs normally afterwards.
        assert self.verify(gym_servers, task(SUM), fenced("print(sum(map(int, input().split())))"))["reward"] == 1.0

    def test_a_forked_child_cannot_answer_after_its_parent(self, gym_servers: RunningServers):
        # The parent exits at once; a child printing the answer later is not part of the run's output.
        code = (
            "import os, time\na, b = map(int, input().split())\nif os.fork() == 0:\n"
            "    time.sleep(0.3)\n    print(a + b)\n"
        )
        verdict = self.verify(gym_servers, task(SUM), fenced(code))
        assert verdict["result"] == [-2]

    # --- reference quirks of standard-input programs -----------------------------------------------

    def test_reference_stdin_gives_lines_without_their_newline(self, gym_servers: RunningServers):
        # readline() has no trailing newline in the reference's mock: [:-1] cuts a real character.
        tests = {"inputs": ["hello\n"], "outputs": ["hello\n"], "fn_name": None}
        code = "import sys\nprint(sys.stdin.readline()[:-1])"
        assert self.verify(gym_servers, task(tests), fenced(code))["result"] == [-2]
        assert self.verify(gym_servers, task(tests), fenced(code), instance="plain")["result"] == [True]

    def test_reference_stdin_mocks_read_readlines_buffer_and_open(self, gym_servers: RunningServers):
        tests = {"inputs": ["2\n3 4\n"], "outputs": ["3 ['2', '3 4', ''] 7 7\n"], "fn_name": None}
        code = (
            "import sys\nwhole = sys.stdin.read()\nlines = sys.stdin.readlines()\n"
            "data = sys.stdin.buffer.read().split()\nfile = open('anything.txt').read().split()\n"
            "print(len(whole.split()), lines, int(data[1]) + int(data[2]), int(file[1]) + int(file[2]))"
        )
        assert self.verify(gym_servers, task(tests), fenced(code))["reward"] == 1.0

    def test_reference_statements_run_inside_a_function(self, gym_servers: RunningServers):
        # `global n` names a module variable the wrapped program never defines: NameError, -4.
        code = "n = int(input().split()[0])\ndef show():\n    global n\n    print(n + 2)\nshow()"
        tests = {"inputs": ["1 2\n"], "outputs": ["3\n"], "fn_name": None}
        assert self.verify(gym_servers, task(tests), fenced(code))["result"] == [-4]
        assert self.verify(gym_servers, task(tests), fenced(code), instance="plain")["result"] == [True]

    def test_a_final_main_guard_runs_and_an_earlier_one_does_not(self, gym_servers: RunningServers):
        final = "def main():\n    a, b = map(int, input().split())\n    print(a + b)\nif __name__ == '__main__':\n    main()"
        assert self.verify(gym_servers, task(SUM), fenced(final))["reward"] == 1.0
        earlier = "if __name__ == '__main__':\n    print(sum(map(int, input().split())))\nx = 1"
        assert self.verify(gym_servers, task(SUM), fenced(earlier))["result"] == [-2]
        assert self.verify(gym_servers, task(SUM), fenced(earlier), instance="plain")["reward"] == 1.0

    def test_class_solution_in_a_stdin_program_is_minus_four(self, gym_servers: RunningServers):
        code = "class Solution:\n    pass\nprint(sum(map(int, input().split())))"
        assert self.verify(gym_servers, task(SUM), fenced(code))["result"] == [-4]
        assert self.verify(gym_servers, task(SUM), fenced(code), instance="plain")["reward"] == 1.0

    def test_the_prelude_is_there_without_imports(self, gym_servers: RunningServers):
        tests = {"inputs": ["12 18\n"], "outputs": ["6 deque([1])\n"], "fn_name": None}
        code = "a, b = map(int, input().split())\nprint(gcd(a, b), deque([1]))"
        assert self.verify(gym_servers, task(tests), fenced(code))["reward"] == 1.0

    # --- function calls ----------------------------------------------------------------------------

    def test_a_solution_class_method_is_called_with_json_arguments(self, gym_servers: RunningServers):
        code = (
            "class Solution:\n    def maxProfit(self, prices):\n        low, best = 10**9, 0\n"
            "        for p in prices:\n            low = min(low, p)\n            best = max(best, p - low)\n"
            "        return best"
        )
        verdict = self.verify(gym_servers, task(PROFIT), fenced(code))
        assert (verdict["reward"], verdict["result"]) == (1.0, [True, True])

    def test_a_module_function_with_several_arguments_and_a_tuple_result(self, gym_servers: RunningServers):
        tests = {"inputs": ["[1, 2]\n3"], "outputs": ["[[1, 2], 3.0000001]"], "fn_name": "pair"}
        code = "def pair(xs, y):\n    print('debugging output is not the result')\n    return (xs, y)"
        assert self.verify(gym_servers, task(tests), fenced(code))["reward"] == 1.0

    def test_a_wrong_result_a_crash_and_a_missing_function(self, gym_servers: RunningServers):
        wrong = self.verify(gym_servers, task(PROFIT), fenced("def maxProfit(prices):\n    return 5"))
        assert wrong["result"] == [True, -2] and wrong["metadata"]["output"] == "5"
        crash = self.verify(gym_servers, task(PROFIT), fenced("def maxProfit(prices):\n    return prices[99]"))
        assert crash["result"] == [-4] and "IndexError" in crash["metadata"]["error"]
        missing = self.verify(gym_servers, task(PROFIT), fenced("def other(prices):\n    return 5"))
        assert missing["result"] == [-4]

    def test_a_result_that_is_not_json_is_a_wrong_answer(self, gym_servers: RunningServers):
        tests = {"inputs": ["[1, 2]"], "outputs": ["[1, 2]"], "fn_name": "f"}
        # An object claiming equality with everything cannot pass: the comparison is made outside.
        code = "class Always:\n    def __eq__(self, other):\n        return True\ndef f(xs):\n    return Always()"
        verdict = self.verify(gym_servers, task(tests), fenced(code))
        assert verdict["result"] == [-2] and "Always" in verdict["metadata"]["output"]

    def test_a_slow_call_is_a_time_limit_and_a_slow_module_an_error(self, gym_servers: RunningServers):
        slow_call = self.verify(
            gym_servers, task(PROFIT), fenced("def maxProfit(prices):\n    while True:\n        pass")
        )
        assert slow_call["result"] == [-3]
        slow_module = self.verify(
            gym_servers, task(PROFIT), fenced("while True:\n    pass\ndef maxProfit(p):\n    return 5")
        )
        assert slow_module["result"] == [-4]

    def test_a_call_that_swallows_the_alarm_is_still_stopped(self, gym_servers: RunningServers):
        code = (
            "def maxProfit(prices):\n    while True:\n        try:\n            while True:\n                pass\n"
            "        except BaseException:\n            pass"
        )
        assert self.verify(gym_servers, task(PROFIT), fenced(code))["result"] == [-3]

    def test_a_forged_result_fails(self, gym_servers: RunningServers):
        # The program knows the expected 5 and 0 but returns -1. It prints fake results, writes them
        # to every descriptor, and calls the driver's own frame writer (found through gc) with the
        # right answer: the run then holds two verdicts, which is malformed, and fails.
        code = (
            "import gc, os, sys\n"
            "print('5')\n"
            "def maxProfit(prices):\n"
            "    answer = '5' if prices[0] == 7 and prices[1] == 1 else '0'\n"
            "    print(answer)\n"
            "    for fd in range(0, 32):\n"
            "        try:\n"
            "            os.write(fd, ('result ' + answer + '\\n').encode())\n"
            "        except OSError:\n"
            "            pass\n"
            "    for obj in gc.get_objects():\n"
            "        code = getattr(obj, '__code__', None)\n"
            "        if code is not None and obj.__name__ == 'frame' and 'kind' in code.co_varnames:\n"
            "            obj('result', answer)\n"
            "    return -1\n"
        )
        verdict = self.verify(gym_servers, task(PROFIT), fenced(code))
        assert verdict["reward"] == 0.0
        assert verdict["result"] == [-2]

    def test_a_test_line_that_is_not_json_fails_the_program(self, gym_servers: RunningServers):
        tests = {"inputs": ["[1]", "not json"], "outputs": ["1", "2"], "fn_name": "f"}
        verdict = self.verify(gym_servers, task(tests), fenced("def f(x):\n    return 1"))
        assert verdict["result"] == [-4] and "JSON" in verdict["metadata"]["error_message"]

    # --- answers without code, the reasoning format, empty tests -------------------------------------

    def test_an_empty_answer_fills_in_only_the_reward_and_difficulty(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM, difficulty="hard"), "   \n")
        assert verdict == {
            "reward": 0.0,
            "extracted_model_output": None,
            "extracted_model_code": None,
            "result": None,
            "metadata": None,
            "unit_tests_time_taken": None,
            "reasoning_format_violation_rate": None,
            "difficulty": "hard",
        }

    def test_an_answer_without_code_scores_zero(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM), "print(a + b)")
        assert (verdict["reward"], verdict["extracted_model_output"], verdict["result"]) == (0.0, "print(a + b)", None)

    def test_think_tags_replace_the_reward_with_the_penalty(self, gym_servers: RunningServers):
        text = "<think>easy</think>\n" + fenced("print(sum(map(int, input().split())))")
        default = self.verify(gym_servers, task(SUM), text)
        assert (default["reward"], default["result"], default["reasoning_format_violation_rate"]) == (
            0.0,
            [True] * 3,
            1.0,
        )
        assert self.verify(gym_servers, task(SUM), text, instance="penalised")["reward"] == -0.5
        reasoning = {
            "output": [
                {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "<think><think>"}]},
                *assistant_response(fenced("print(sum(map(int, input().split())))"))["output"],
            ]
        }
        assert self.verify(gym_servers, task(SUM), reasoning)["reasoning_format_violation_rate"] == 1.0

    def test_no_tests_is_a_pass(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task({"inputs": [], "outputs": [], "fn_name": None}), fenced("print(1)"))
        assert (verdict["reward"], verdict["result"]) == (1.0, [])

    def test_the_global_deadline_fails_every_test_with_minus_one(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM), fenced("while True:\n    pass"), instance="tiny_deadline")
        assert verdict["result"] == [-1, -1, -1] and verdict["metadata"]["error_message"] == "Global Timeout"

    # --- bad rows and the sandbox's own failure ------------------------------------------------------

    def test_a_row_without_verifier_metadata_is_a_422_naming_it(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post(
            "/verify", {"responses_create_params": {"input": "x"}, "response": assistant_response(fenced("print(1)"))}
        )
        assert reply.status == 422 and "verifier_metadata" in reply.json()["error"]["message"]

    def test_unit_tests_of_different_lengths_are_a_422(self, gym_servers: RunningServers):
        tests = {"inputs": ["1\n", "2\n"], "outputs": ["1\n"], "fn_name": None}
        reply = gym_servers.caller().post(
            "/verify", {**task(tests), "response": assistant_response(fenced("print(1)"))}
        )
        assert reply.status == 422 and "2 inputs but 1 outputs" in reply.json()["error"]["message"]

    def test_undeclared_row_fields_and_nulls_are_accepted(self, gym_servers: RunningServers):
        row = task({"inputs": ["1 2\n"], "outputs": ["3\n"]}, difficulty=None, hash_id="x", dataset="d", source=None)
        verdict = self.verify(gym_servers, row, fenced("print(sum(map(int, input().split())))"))
        assert (verdict["reward"], verdict["difficulty"]) == (1.0, None)

    def test_a_failed_sandbox_is_a_502_sandbox_failed_never_a_reward(self, gym_servers: RunningServers):
        reply = gym_servers.caller("unstarted").post(
            "/verify", {**task(SUM), "response": assistant_response(fenced("print(3)"))}
        )
        assert reply.status == 502, reply.text[:500]
        assert reply.json()["error"]["type"] == "sandbox_failed"
        assert "reward" not in reply.json()


# --- the configs --------------------------------------------------------------------------------------


async def test_the_scripted_config_scores_every_example_through_the_agent():
    # The scripted model answers each example with its conformance response (its script rides in metadata).
    config = yaml.safe_load((PACKAGE / "configs" / "code_gen_scripted.yaml").read_text())
    manager = plugin_manager(gym_code_gen.plugin, *first_party("scripted", "simple_agent"))
    with running_servers(config, plugins=manager) as running:
        async with ServerClient(running) as client:
            for row in read_rows(EXAMPLES):
                script = [{"text": row["conformance"]["response"]}]
                params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**row, "responses_create_params": params})
                assert result["reward"] == row["conformance"]["reward"], result
                assert result["difficulty"] == row["verifier_metadata"]["difficulty"]


@pytest.mark.parametrize("name", ["code_gen.yaml", "code_gen_local.yaml", "code_gen_scripted.yaml"])
def test_configs_validate(name):
    from gym_core.config import load_config

    manager = plugin_manager(
        gym_code_gen.plugin, *first_party("scripted", "simple_agent", "local_llama", "openai_model")
    )
    overrides = (
        ["policy_model.base_url=http://127.0.0.1:1/v1", "policy_model.model=m"] if name == "code_gen.yaml" else []
    )
    config = load_config([PACKAGE / "configs" / name], overrides, env_file=None, server_types=manager.servers())
    assert config.instances["code_gen"].plugin == "code_gen"
