"""code_gen verifications per second at concurrency 64, on NeMo-style rows (issue 27 item 2).

The rows are LiveCodeBench-format tasks as NeMo Gym's code_gen datasets hold them, ten unit tests
each: standard-input programs and function calls (``fn_name``, a ``class Solution`` method or a
module function), answered right (most) or wrong (a wrong answer at the third test, a crash at the
first, a wrong call result at the fifth), each with the reward it must get. One ``code_gen`` server
(its shipped options, ``unit_test_timeout_secs: 1``) is started as ``gym run --isolation none``
starts it; the rows are sent, cycled, to ``/verify`` at concurrency 64 after a short warm-up.

Reported: verifications/s, p50/p99 latency, errors, ``correct`` (the share that got their reward),
and ``hidden_tests_in_rows`` (whether a failing verdict carried the expected output:
it tells which code answered when measuring before and after a change).

``python -m benchmarks --only code_gen_throughput --size small``
"""

from __future__ import annotations

import json
import random
from typing import Any

import aiohttp

from gym_core.testing import assistant_response

from benchmarks._common import gym_servers
from benchmarks.verify_throughput import _drive, open_sessions
from gym_cli.rollouts import run_async

SIZES = {"tiny": 64, "small": 256, "full": 1024}
CONCURRENCY = 64
TESTS = 10


def _fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}\n```"


def _row(inputs: list[str], outputs: list[str], fn_name: str | None, answer: str, reward: float) -> dict[str, Any]:
    prompt = (
        "You will be given a competitive programming problem. Write a Python 3 program that solves it. "
        "You must use ```python for just the final solution code block."
    )
    return {
        "responses_create_params": {"input": [{"role": "user", "content": prompt}]},
        "verifier_metadata": {
            "unit_tests": {"inputs": inputs, "outputs": outputs, "fn_name": fn_name},
            "difficulty": "easy",
        },
        "response": assistant_response(_fenced(answer)),
        "reward": reward,
    }


def rows() -> list[dict[str, Any]]:
    """The benchmark's rows, the same every time (a fixed seed)."""
    rng = random.Random(27)
    pairs = [(rng.randint(-(10**9), 10**9), rng.randint(-(10**9), 10**9)) for _ in range(TESTS)]
    lists = [[rng.randint(-1000, 1000) for _ in range(rng.randint(1, 40))] for _ in range(TESTS)]
    words = ["".join(rng.choice("abcdeiouxyz") for _ in range(rng.randint(1, 30))) for _ in range(TESTS)]
    prices = [[rng.randint(1, 100) for _ in range(rng.randint(1, 30))] for _ in range(TESTS)]

    def profit(p: list[int]) -> int:
        low, best = 10**9, 0
        for x in p:
            low, best = min(low, x), max(best, x - low)
        return best

    def kadane(xs: list[int]) -> int:
        best = cur = xs[0]
        for x in xs[1:]:
            cur = max(x, cur + x)
            best = max(best, cur)
        return best

    sum_in = [f"{a} {b}\n" for a, b in pairs]
    sum_out = [f"{a + b}\n" for a, b in pairs]
    sort_in = [f"{len(xs)}\n{' '.join(map(str, xs))}\n" for xs in lists]
    sort_out = [" ".join(map(str, sorted(xs))) + "\n" for xs in lists]
    kad_out = [f"{kadane(xs)}\n" for xs in lists]
    vowel_in = [w + "\n" for w in words]
    vowel_out = [f"{sum(c in 'aeiou' for c in w)}\n" for w in words]
    profit_in = [json.dumps(p) for p in prices]
    profit_out = [json.dumps(profit(p)) for p in prices]
    add_in = [f"{a}\n{b}" for a, b in pairs]
    add_out = [json.dumps(a + b) for a, b in pairs]
    vowel_out_wrong = list(vowel_out)
    vowel_in_wrong = list(vowel_in)
    vowel_in_wrong[2], vowel_out_wrong[2] = "yyy\n", "0\n"  # the wrong answer counts y: fails here
    return [
        _row(sum_in, sum_out, None, "a, b = map(int, input().split())\nprint(a + b)", 1.0),
        _row(
            sort_in, sort_out, None, "n = int(input())\nxs = list(map(int, input().split()))\nprint(*sorted(xs))", 1.0
        ),
        _row(
            sort_in,
            kad_out,
            None,
            "import sys\ndata = sys.stdin.read().split()\nxs = list(map(int, data[1:]))\n"
            "best = cur = xs[0]\nfor x in xs[1:]:\n    cur = max(x, cur + x)\n    best = max(best, cur)\nprint(best)",
            1.0,
        ),
        _row(vowel_in_wrong, vowel_out_wrong, None, "s = input().strip()\nprint(sum(c in 'aeiouy' for c in s))", 0.0),
        _row(
            profit_in,
            profit_out,
            "maxProfit",
            "class Solution:\n    def maxProfit(self, prices):\n        low, best = 10**9, 0\n"
            "        for p in prices:\n            low = min(low, p)\n            best = max(best, p - low)\n"
            "        return best",
            1.0,
        ),
        _row(add_in, add_out, "add", "def add(a, b):\n    return a + b", 1.0),
        _row(sum_in, sum_out, None, "a, b = map(int, input().split())\nprint([a + b][1])", 0.0),
        _row(add_in, add_out, "add", f"def add(a, b):\n    return a - b if a == {pairs[4][0]} else a + b", 0.0),
    ]


async def _hidden_tests_in_rows(url: str, body: bytes, headers: dict[str, str]) -> bool:
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=body, headers=headers) as resp:
            verdict = json.loads(await resp.read())
    return "expected" in (verdict.get("metadata") or {})


def run(size: str) -> dict[str, Any]:
    total = SIZES[size]
    data = rows()
    rewards = [row.pop("reward") for row in data]
    bodies = [json.dumps(row).encode() for row in data]
    config = {"code_gen": {"plugin": "code_gen", "unit_test_timeout_secs": 1}}
    with gym_servers(config) as state:
        base = state.config.instances["code_gen"].url
        url = base + "/verify"
        headers = run_async(open_sessions(base, data, getattr(state.config, "auth_token", None)))
        run_async(_drive(url, bodies, headers, rewards, len(bodies), 8))  # warm-up
        measured = run_async(_drive(url, bodies, headers, rewards, total, CONCURRENCY))
        wrong = next(i for i, reward in enumerate(rewards) if reward == 0.0)
        hidden = run_async(_hidden_tests_in_rows(url, bodies[wrong], headers[wrong]))
    return {
        "rows": len(data),
        "tests_per_row": TESTS,
        str(CONCURRENCY): measured,
        "hidden_tests_in_rows": hidden,
    }


if __name__ == "__main__":
    import sys

    print(json.dumps(run(sys.argv[1] if len(sys.argv) > 1 else "small"), indent=2))
