"""The pure parts of code_gen's verdict (environments spec §9): finding the code in the answer,
the reasoning-format check, and reading the sandboxed driver's verdicts (the comparisons themselves,
which the driver makes, are in :mod:`gym_code_gen.compare`).

Result codes of one unit test: ``True`` (passed), ``-1`` (the global deadline passed), ``-2``
(wrong answer), ``-3`` (time limit), ``-4`` (runtime or syntax error).
"""

from __future__ import annotations

import json
from typing import Any

from gym_core.schemas import Reasoning, Response, output_text

from gym_code_gen.compare import call_result_matches, stdout_matches

__all__ = [
    "PASSED",
    "GLOBAL_TIMEOUT",
    "WRONG_ANSWER",
    "TIME_LIMIT",
    "RUNTIME_ERROR",
    "ERROR_MESSAGES",
    "extract_code",
    "reasoning_format_violation",
    "stdout_matches",
    "call_result_matches",
    "global_deadline_s",
    "read_verdicts",
    "truncate",
]

PASSED = True
GLOBAL_TIMEOUT = -1
WRONG_ANSWER = -2
TIME_LIMIT = -3
RUNTIME_ERROR = -4
ERROR_MESSAGES = {
    GLOBAL_TIMEOUT: "Global Timeout",
    WRONG_ANSWER: "Wrong Answer",
    TIME_LIMIT: "Time Limit Exceeded",
    RUNTIME_ERROR: "Runtime Error",
}

FENCE = "```"


def extract_code(text: str) -> str | None:
    """The lines strictly between the second-to-last and the last line holding a fence, joined
    by newlines; None with fewer than two fence lines (the language tag does not matter)."""
    lines = text.split("\n")
    fences = [index for index, line in enumerate(lines) if FENCE in line]
    if len(fences) < 2:
        return None
    return "\n".join(lines[fences[-2] + 1 : fences[-1]])


def reasoning_format_violation(response: Response) -> bool:
    """``<think>`` or ``</think>`` in OUTPUT_TEXT, or more than one of either in the reasoning
    items' summaries (their texts concatenated)."""
    text = output_text(response)
    if "<think>" in text or "</think>" in text:
        return True
    reasoning = "".join(part.text for item in response.output if isinstance(item, Reasoning) for part in item.summary)
    return reasoning.count("<think>") > 1 or reasoning.count("</think>") > 1


def global_deadline_s(timeout_s: float, tests: int) -> float:
    """The reference's deadline for all of a program's tests: ``(timeout + 1) × n + 5`` seconds."""
    return (timeout_s + 1) * tests + 5


def read_verdicts(stdout: bytes, nonce: str) -> tuple[dict[int, dict[str, Any]], bool]:
    """The driver's reports in the sandbox's ``stdout``: its verdicts by test index (lines
    ``<nonce> <index> <json object>``, the object holding ``code`` and the failure's details) and
    whether it said it was done (``<nonce> done``). Only the driver knows the nonce: lines without
    it are ignored. A malformed line, or a second verdict for one test, raises ``ValueError``."""
    verdicts: dict[int, dict[str, Any]] = {}
    done = False
    prefix = nonce + " "
    for line in stdout.decode("utf-8", errors="replace").split("\n"):
        if not line.startswith(prefix):
            continue
        rest = line[len(prefix) :]
        if rest == "done":
            done = True
            continue
        index, _, payload = rest.partition(" ")
        verdict = json.loads(payload)
        if not index.isdigit() or int(index) in verdicts or not isinstance(verdict, dict) or "code" not in verdict:
            raise ValueError(f"malformed driver report: {line[len(prefix) :][:200]!r}")
        verdicts[int(index)] = verdict
    return verdicts, done


def truncate(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters, marked when cut (metadata stays small)."""
    return text if len(text) <= limit else text[:limit] + f"...(truncated {len(text) - limit} chars)"
