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
from gym_core.sandbox import Sandbox, SandboxPool
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
PROFIT_CODE = (
    "class Solution:\n    def maxProfit(self, prices):\n        low, best = 10**9, 0\n"
    "        for p in prices:\n            low = min(low, p)\n            best = max(best, p - low)\n"
    "        return best"
)


# Finds the old driver's frame writer through gc (and with it the nonce and the channel), every
# 32-hex-digit string in its memory and in /proc, the driver's descriptors through /proc; writes
# forged results and verdicts (old and new formats) everywhere it can, and exits without returning.
FORGER = """import gc, os, re
def maxProfit(prices):
    answer = '5' if prices[:2] == [7, 1] else '0'
    for obj in gc.get_objects():
        code = getattr(obj, '__code__', None)
        if code is not None and getattr(obj, '__name__', '') == 'frame' and 'kind' in code.co_varnames:
            obj('result', answer)
            os._exit(0)
    nonces = {obj for obj in gc.get_objects() if isinstance(obj, str) and re.fullmatch('[0-9a-f]{32}', obj)}
    targets = [1, 2]
    for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
        for part in ('cmdline', 'environ'):
            try:
                with open(f'/proc/{pid}/{part}', 'rb') as file:
                    nonces.update(m.decode() for m in re.findall(rb'[0-9a-f]{32}', file.read()))
            except OSError:
                pass
        for fd in ('1', '2'):
            try:
                targets.append(os.open(f'/proc/{pid}/fd/{fd}', os.O_WRONLY))
            except OSError:
                pass
    forged = ''.join(
        f'{n} result {answer}\\n{n} 0 {{"code": true}}\\n{n} 1 {{"code": true}}\\n{n} done\\n' for n in nonces
    )
    for fd in targets:
        try:
            os.write(fd, forged.encode())
        except OSError:
            pass
    os._exit(0)
"""

# Searches its own objects, every process's memory, environment, command line and descriptors
# through /proc, and the scratch directory, for the expected output; prints what it found.
SEARCHER = """import gc, os, re, sys
pattern = re.compile(rb'HIDDEN-[0-9]+-[0-9]+')
found, counts = set(), [0]
def scan(data):
    counts[0] += len(data)
    found.update(pattern.findall(data))
def read_all(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return b''
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    except OSError:
        pass
    os.close(fd)
    return b''.join(chunks)
for obj in gc.get_objects():
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    for item in list(items):
        if isinstance(item, (str, bytes)):
            scan(item if isinstance(item, bytes) else item.encode(errors='replace'))
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    for part in ('cmdline', 'environ'):
        scan(read_all(f'/proc/{pid}/{part}'))
    try:
        names = os.listdir(f'/proc/{pid}/fd')
    except OSError:
        names = []
    for name in names:
        scan(read_all(f'/proc/{pid}/fd/{name}'))
    try:
        mem = os.open(f'/proc/{pid}/mem', os.O_RDONLY)
    except OSError:
        continue
    for line in read_all(f'/proc/{pid}/maps').decode().splitlines():
        start, end = (int(x, 16) for x in line.split()[0].split('-'))
        try:
            scan(os.pread(mem, min(end - start, 1 << 26), start))
        except OSError:
            pass
    os.close(mem)
for name in os.listdir('.'):
    scan(read_all(name))
print(b' '.join(sorted(found)).decode() or 'nothing')
sys.stderr.write(f'scanned {counts[0]} bytes')
"""


class UnstartedSandboxServer(CodeGenServer):
    """A code_gen server whose sandbox is never started: every run is the sandbox's own failure."""

    async def startup(self) -> None:
        await super().startup()
        self.sandbox = Sandbox(self.config.sandbox_mode, max_concurrency=self.config.num_processes)
        self.pool = SandboxPool(self.sandbox, size=self.config.num_processes, preload=(self.runner, "main"))


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
        "unsandboxed": {"plugin": "code_gen", **FAST, "sandbox_mode": "unsandboxed"},
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
        assert verdict["metadata"] == {"error_code": -2, "error_message": "Wrong Answer"}

    def test_a_failing_verdict_keeps_the_hidden_test_out_of_the_row_unless_debugging(self, gym_servers: RunningServers):
        # Issue 24: the failing test's input and expected output, and what the program printed, went
        # into every row; a policy shown its rows (a feedback agent, reused data) learned the tests.
        code = "import sys\na, b = map(int, input().split())\nsys.stderr.write('debugging ' + str(a))\nprint(a * b)"
        verdict = self.verify(gym_servers, task(SUM), fenced(code))
        assert verdict["result"] == [-2]
        assert verdict["metadata"] == {"error_code": -2, "error_message": "Wrong Answer"}
        crash = self.verify(gym_servers, task(SUM), fenced("print(1 / 0)"))
        assert crash["metadata"] == {
            "error_code": -4,
            "error_message": "Runtime Error",
            "error": "ZeroDivisionError",
            "exit_code": 1,
            "signal": None,
        }
        shown = self.verify(gym_servers, task(SUM), fenced(code), instance="debugging")["metadata"]
        assert (shown["inputs"], shown["expected"], shown["output"]) == ("1 2\n", "3\n", "2\n")
        assert shown["traceback"] == "debugging 1"

    def test_a_later_failure_is_reported_after_earlier_passes(self, gym_servers: RunningServers):
        # The third test crashes (a zero divisor), after two that pass; a slow earlier test is awaited.
        tests = {"inputs": ["2\n", "1\n", "0\n"], "outputs": ["0.5\n", "1\n", "0\n"], "fn_name": None}
        code = "import time\nn = int(input())\nif n == 2: time.sleep(0.3)\nprint(1 / n)"
        verdict = self.verify(gym_servers, task(tests), fenced(code))
        assert verdict["result"] == [True, True, -4]
        assert verdict["metadata"]["error"] == "ZeroDivisionError"

    def test_a_wrong_number_of_lines_is_a_wrong_answer(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM), fenced("print(3)\nprint()\nprint(4)"))
        assert verdict["result"] == [-2]

    def test_decimal_outputs_compare_as_numbers(self, gym_servers: RunningServers):
        tests = {"inputs": [""], "outputs": ["0.5 1000\n"], "fn_name": None}
        assert self.verify(gym_servers, task(tests), fenced("print('0.50', '1e3')"))["reward"] == 1.0

    def test_a_runtime_error_is_minus_four(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM), fenced("print(undefined_name)"))
        assert (verdict["reward"], verdict["result"]) == (0.0, [-4])
        assert verdict["metadata"]["error"] == "NameError" and "traceback" not in verdict["metadata"]

    def test_debug_keeps_the_programs_stderr_and_error_message(self, gym_servers: RunningServers):
        code = "import sys\nsys.stderr.write('start' + 'x' * 5000)\nraise ValueError('boom')"
        full = self.verify(gym_servers, task(SUM), fenced(code), instance="debugging")["metadata"]
        assert full["traceback"].startswith("start") and full["traceback"].endswith("ValueError: boom\n")
        assert full["error"] == "ValueError: boom"

    def test_a_syntax_error_is_minus_four(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, task(SUM), fenced("def broken(:\n    pass"))
        assert verdict["result"] == [-4]
        assert verdict["metadata"]["error"] == "SyntaxError"

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
        verdict = self.verify(gym_servers, task(PROFIT), fenced(PROFIT_CODE))
        assert (verdict["reward"], verdict["result"]) == (1.0, [True, True])

    def test_a_module_function_with_several_arguments_and_a_tuple_result(self, gym_servers: RunningServers):
        tests = {"inputs": ["[1, 2]\n3"], "outputs": ["[[1, 2], 3.0000001]"], "fn_name": "pair"}
        code = "def pair(xs, y):\n    print('debugging output is not the result')\n    return (xs, y)"
        assert self.verify(gym_servers, task(tests), fenced(code))["reward"] == 1.0

    def test_a_wrong_result_a_crash_and_a_missing_function(self, gym_servers: RunningServers):
        wrong = self.verify(
            gym_servers, task(PROFIT), fenced("def maxProfit(prices):\n    return 5"), instance="debugging"
        )
        assert wrong["result"] == [True, -2] and wrong["metadata"]["output"] == "5"
        crash = self.verify(gym_servers, task(PROFIT), fenced("def maxProfit(prices):\n    return prices[99]"))
        assert crash["result"] == [-4] and crash["metadata"]["error"] == "IndexError"
        missing = self.verify(gym_servers, task(PROFIT), fenced("def other(prices):\n    return 5"))
        assert missing["result"] == [-4]

    def test_a_result_that_is_not_json_is_a_wrong_answer(self, gym_servers: RunningServers):
        tests = {"inputs": ["[1, 2]"], "outputs": ["[1, 2]"], "fn_name": "f"}
        # An object claiming equality with everything cannot pass: the comparison is made outside.
        code = "class Always:\n    def __eq__(self, other):\n        return True\ndef f(xs):\n    return Always()"
        verdict = self.verify(gym_servers, task(tests), fenced(code), instance="debugging")
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

    def test_a_program_cannot_forge_the_drivers_report(self, gym_servers: RunningServers):
        # Issue 24: in call mode the program found the driver's frame writer (and so its nonce and
        # channel) in its own process, wrote "result <answer>" and exited: the test passed without
        # the function ever returning. The program below tries that and every other way it has.
        verdict = self.verify(gym_servers, task(PROFIT), fenced(FORGER))
        assert verdict["reward"] == 0.0
        assert verdict["result"] == [-4] and verdict["metadata"]["error"] == "the program ended without a result"

    def test_a_program_cannot_find_the_expected_output(self, gym_servers: RunningServers):
        # The driver compares inside the sandbox, so the expected outputs are there, in the driver's
        # memory alone: a program searching everything it can read and printing what it found (which
        # would pass) finds nothing.
        tests = {"inputs": ["x\n"], "outputs": ["HIDDEN-7919-104729\n"], "fn_name": None}
        verdict = self.verify(gym_servers, task(tests), fenced(SEARCHER), instance="debugging")
        assert verdict["reward"] == 0.0 and verdict["result"] == [-2], verdict["metadata"]
        assert verdict["metadata"]["output"] == "nothing\n"
        scanned = verdict["metadata"]["traceback"]
        assert scanned.startswith("scanned ") and int(scanned.split()[1]) > 10_000  # the search did run

    def test_a_program_that_stops_its_driver_fails(self, gym_servers: RunningServers):
        # The program runs as the driver's user, so it can signal the driver and the zygote: its test
        # then has no verdict, which is a failure (-4), never a pass. Test 1 passes; on test 2 the
        # program prints the right answer and then kills every other process, or its zygote.
        answer = "import os, signal\na, b = map(int, input().split())\nprint(a + b, flush=True)\nif a == 10:\n"
        # Killing every process also kills the sandbox pool's worker that ran the driver: the run
        # then ends with no report at all, test 1's pass lost with it (still a failure, never a pass).
        for kill, result in (
            ("    os.kill(-1, signal.SIGKILL)", [-4]),
            ("    os.kill(os.getppid(), signal.SIGKILL)", [True, -4]),
        ):
            verdict = self.verify(gym_servers, task(SUM), fenced(answer + kill))
            assert (verdict["reward"], verdict["result"]) == (0.0, result), kill
            assert verdict["metadata"]["error"].startswith("the test driver was stopped")

    def test_what_a_test_leaves_behind_is_stopped_before_the_next(self, gym_servers: RunningServers):
        # Test 1 leaves a process in a session of its own (out of its process group); the next tests
        # see no process but their own ancestors (the zygote, the driver, the sandbox pool's worker,
        # the sandbox's init) and their own.
        code = (
            "import os, time\na, b = map(int, input().split())\n"
            "if a == 1 and os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
            "alive = [p for p in os.listdir('/proc') if p.isdigit()]\n"
            "print(a + b if a == 1 or len(alive) == 5 else 'a process of test 1 is still here')\n"
        )
        assert self.verify(gym_servers, task(SUM), fenced(code))["result"] == [True, True, True]

    def test_what_a_test_wrote_is_gone_before_the_next(self, gym_servers: RunningServers):
        # Test 1 writes files (a closed directory too) in the scratch directory and in /dev/shm; the
        # next tests find only the run's own files there, as each test did in a sandbox of its own.
        code = (
            "import os\na, b = map(int, input().split())\n"
            "if a == 1:\n    os.makedirs('d/e')\n    os.chmod('d', 0)\n"
            "    for path in ('note', '/dev/shm/note'):\n        os.close(os.open(path, os.O_CREAT | os.O_WRONLY))\n"
            "left = sorted(os.listdir('.')) + sorted(os.listdir('/dev/shm'))\n"
            # (the driver is preloaded by the pool's worker: no main.py there)
            "print(a + b if a == 1 or left == ['compare.py', 'solution.py'] else left)\n"
        )
        verdict = self.verify(gym_servers, task(SUM), fenced(code), instance="debugging")
        assert verdict["result"] == [True, True, True], verdict["metadata"]

    def test_the_unsandboxed_mode_runs_the_same_driver(self, gym_servers: RunningServers):
        # No PID namespace there: the driver stops a test's process group only, never "every other process".
        right = self.verify(gym_servers, task(SUM), fenced("print(sum(map(int, input().split())))"), "unsandboxed")
        assert right["result"] == [True, True, True]
        wrong = self.verify(gym_servers, task(SUM), fenced("a, b = map(int, input().split())\nprint(3)"), "unsandboxed")
        assert wrong["result"] == [True, -2]
        call = self.verify(gym_servers, task(PROFIT), fenced(PROFIT_CODE), instance="unsandboxed")
        assert call["result"] == [True, True]

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

    def test_a_row_without_tests_is_a_422_naming_the_field(self, gym_servers: RunningServers):
        # Issue 24: a task with no unit tests scored 1.0 for any code.
        for fn_name in (None, "f"):
            row = task({"inputs": [], "outputs": [], "fn_name": fn_name})
            reply = gym_servers.caller().post("/verify", {**row, "response": assistant_response(fenced("print(1)"))})
            assert reply.status == 422, reply.text[:500]
            assert "verifier_metadata.unit_tests.inputs" in reply.json()["error"]["message"]

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
