"""What both adapters' tests check of a rollout: the trainer's ids, mask, log-probs and reward are the
gym rollout's own (its ``/run`` result, token for token)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "gym_train" / "examples"
CONFIG = EXAMPLES / "agents_counter.yaml"
TASKS = EXAMPLES / "trl_counter.jsonl"


def tasks(n: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in TASKS.read_text().splitlines()[:n]]


def tokenizer() -> Any:
    """SmolLM2-135M's tokenizer from the GGUF that local_llama serves (gym_train.model's file)."""
    import transformers

    from gym_train.model import default_gguf_path

    path = default_gguf_path()
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def check_against_the_row(
    result: dict[str, Any],
    prompt_ids: list[int],
    response_ids: list[int],
    mask: list[int],
    log_probs: list[float] | None,
    reward: float,
    decode: Any,
) -> int:
    """Assert the trainer's view of one rollout equals its ``/run`` result; return its model calls."""
    carriers = [i for i in result["response"]["output"] if i.get("generation_token_ids") is not None]
    assert carriers, "the rollout carries no token ids"
    assert prompt_ids == carriers[0]["prompt_token_ids"]
    last = carriers[-1]
    assert prompt_ids + response_ids == last["prompt_token_ids"] + last["generation_token_ids"]
    assert len(mask) == len(response_ids)
    generated = [t for c in carriers for t in c["generation_token_ids"]]
    assert [t for t, m in zip(response_ids, mask) if m == 1] == generated
    if log_probs is not None:
        assert len(log_probs) == len(response_ids)
        assert [lp for lp, m in zip(log_probs, mask) if m == 1] == [
            float(x) for c in carriers for x in c["generation_log_probs"]
        ]
        assert all(lp == 0.0 for lp, m in zip(log_probs, mask) if m == 0)
    assert reward == float(result["reward"])
    if len(carriers) > 1:  # the tokens between generations are the tool's output, masked out
        masked = decode([t for t, m in zip(response_ids, mask) if m == 0])
        assert "<tool_response>" in masked, masked
    return len(carriers)


@contextlib.contextmanager
def head_server(config: Any) -> Iterator[str]:
    """A head server publishing ``config`` (what ``gym run`` serves), in a thread: its URL."""
    from gym_core.head import build_head_app
    from gym_core.serving import ServerThread

    thread = ServerThread(build_head_app(config)).start()
    try:
        yield thread.url
    finally:
        thread.stop()
