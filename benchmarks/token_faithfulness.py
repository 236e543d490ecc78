"""Token faithfulness of multi-turn rollouts on local_llama: drifted tokens must be 0.

Each rollout is three model calls (the first with room for a tool call) over HTTP (``/v1/responses`` of a local_llama server process), the
way the ``token_preserving`` agent makes them: every call asks for token ids, and the next call's
``input`` is the previous one + the model's output items as they came (token fields included) + the
new content (an output per tool call the model made, else a user turn with the count). The first
call is greedy (five tasks, each likely to get a tool call), the later ones sample at temperature 0.7
with a seed per rollout and turn, so rollouts differ.

Checked per later call: its prompt ids begin with the previous call's prompt ids + generated ids
(``drifted_tokens``: the previous ids it does not repeat in place; must be 0). Checked per call: the
returned log-probs equal the engine's own log-probs of those tokens, recomputed in this process by
a fresh engine (``LlamaEngine.log_probs``: teacher forcing, no prefix cache); ``log_prob_mismatches``
counts tokens whose value differs at all.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from gym_core import ServerClient

from benchmarks._common import gym_servers

SIZES = {"tiny": (3, 8), "small": (20, 12), "full": (100, 16)}  # rollouts, max_output_tokens
TURNS = 3
TASKS = [
    "Add 4 to the counter.",
    "Add 1 to the counter.",
    "Decrease the counter by 2.",
    "Add 7 to the counter.",
    "Add 5 to the counter.",
]
TOOLS = [
    {
        "type": "function",
        "name": "increment_counter",
        "description": "Add `count` to the counter.",
        "parameters": {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]},
    },
]


# Two earlier calls of the tool (no token ids: the first prompt renders them) make the model likely to
# call it in its first turn, given room for a whole call; later turns then start with tool outputs.
EXAMPLES: list[dict[str, Any]] = [{"role": "system", "content": "You control a counter with tools."}]
for _n, (_add, _total) in enumerate([(2, 2), (3, 5)]):
    EXAMPLES += [
        {"role": "user", "content": f"Add {_add} to the counter."},
        {
            "type": "function_call",
            "call_id": f"call_{_n}",
            "name": "increment_counter",
            "arguments": json.dumps({"count": _add}),
        },
        {"type": "function_call_output", "call_id": f"call_{_n}", "output": json.dumps({"count": _total})},
    ]
FIRST_TURN_TOKENS = 32


def run(size: str) -> dict[str, Any]:
    from gym_local_llama.engine import LlamaEngine
    from gym_token_preserving.server import drifted_tokens

    rollouts, max_tokens = SIZES[size]
    calls: list[tuple[list[int], list[int], list[float]]] = []
    drifted = compared = tool_calls = 0
    start = time.perf_counter()
    with gym_servers({"policy_model": {"plugin": "local_llama", "n_ctx": 2048, "n_threads": 1}}) as state:

        async def rollout(client: ServerClient, index: int) -> None:
            nonlocal drifted, compared, tool_calls
            items: list[Any] = [*EXAMPLES, {"role": "user", "content": TASKS[index % len(TASKS)]}]
            history: list[int] | None = None
            for turn in range(TURNS):
                body = {
                    "input": items,
                    "tools": TOOLS,
                    "max_output_tokens": FIRST_TURN_TOKENS if turn == 0 else max_tokens,
                    "temperature": 0 if turn == 0 else 0.7,
                    "seed": 1000 * index + turn,
                    "return_token_ids": True,
                }
                response = await client.post("policy_model", "/v1/responses", body)
                last = response["output"][-1]
                prompt, generated = last["prompt_token_ids"], last["generation_token_ids"]
                if history is not None:
                    drifted += drifted_tokens(history, prompt)
                    compared += len(history)
                history = prompt + generated
                calls.append((prompt, generated, last["generation_log_probs"]))
                made = [i for i in response["output"] if i["type"] == "function_call"]
                tool_calls += len(made)
                new = [
                    {"type": "function_call_output", "call_id": c["call_id"], "output": json.dumps({"count": turn + 1})}
                    for c in made
                ] or [{"role": "user", "content": f"The counter is {turn + 1}. Go on."}]
                items = [*items, *response["output"], *new]

        async def all_rollouts() -> None:
            async with ServerClient(state.config) as client:
                for index in range(rollouts):
                    await rollout(client, index)

        asyncio.run(all_rollouts())
    served_s = time.perf_counter() - start
    mismatches = generated_tokens = 0
    worst = 0.0
    rescore_start = time.perf_counter()
    with LlamaEngine(n_ctx=2048, n_threads=1, prefix_cache=False) as engine:
        for prompt, generated, log_probs in calls:
            recomputed = engine.log_probs(prompt, generated)
            generated_tokens += len(generated)
            mismatches += sum(a != b for a, b in zip(recomputed, log_probs)) + abs(len(recomputed) - len(log_probs))
            worst = max([worst, *(abs(a - b) for a, b in zip(recomputed, log_probs))])
    return {
        "rollouts": rollouts,
        "turns_per_rollout": TURNS,
        "max_output_tokens": [FIRST_TURN_TOKENS, max_tokens],
        "model_tool_calls": tool_calls,
        "history_tokens_compared": compared,
        "drifted_tokens": drifted,
        "generated_tokens_rescored": generated_tokens,
        "log_prob_mismatches": mismatches,
        "max_log_prob_abs_diff": worst,
        "seconds": round(served_s, 1),
        "rescore_seconds": round(time.perf_counter() - rescore_start, 1),  # no prefix cache: every prompt whole
    }
