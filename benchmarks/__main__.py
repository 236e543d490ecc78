"""``python -m benchmarks [--size tiny|small|full] [--only NAME...] [--environments TYPE...] [--output DIR]``.

Runs each measurement, then writes ``results.json`` and ``results.md`` (docs/performance.md explains them).
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import signal
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT, load

MEASUREMENTS = (
    "orchestration",
    "strict_floor",
    "startup",
    "scale",
    "model_overhead",
    "worker_pool",
    "verify_throughput",
    "reliability",
    "token_faithfulness",
    "sandbox",
    "repo",
    "code_gen_throughput",
    "collect_memory",
    "scale_100k",
    "local_llama_batch",
    "local_model_vs_llama_server",
    "replicas",
    "trainer_overhead",
)
# Not in the default run: these need hardware CI does not have (``--only`` names them).
OPTIONAL = ("vllm_gpu",)


def _spread(block: dict[str, Any], key: str) -> str:
    """``median (min–max)`` of a figure measured over rounds; the median alone for one round or
    for results written before the harness kept the min and max."""
    low, high = block.get(f"{key}_min"), block.get(f"{key}_max")
    if low is None or high is None or low == high:
        return str(block[key])
    return f"{block[key]} ({low}–{high})"


def _round(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _cell(figure: dict[str, float]) -> str:
    """A :func:`benchmarks._common.spread`-shaped figure as ``median (min–max)``."""
    if figure["min"] == figure["max"]:
        return str(figure["median"])
    return f"{figure['median']} ({figure['min']}–{figure['max']})"


def _local_model_vs_llama_server(c: dict[str, Any]) -> list[str]:
    lines = [
        "## The embedded model vs llama.cpp's own server (local_model_vs_llama_server)",
        "",
        f"Same GGUF ({c['model']}), {c['n_threads']} llama.cpp threads each, greedy, {c['max_tokens']} new tokens "
        f"at most, the same requests sent from outside (aiohttp, `/v1/chat/completions`); local_llama with "
        f"`batch_size` {c['batch_size']}. Aggregate tokens/s, median (min–max) of {c['rounds']} round(s); the "
        f"ratio within each round. Commit {c['commit']}, load average {c['load_before']} before, "
        f"{c['load_after']} after, {c['cpus']} CPUs.",
        "",
        "| concurrent requests | local_llama tokens/s | × single | llama.cpp server tokens/s | × single | ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for level, row in c["levels"].items():
        lines.append(
            f"| {level} | {_cell(row['local_llama'])} | {row['vs_single']['local_llama']} | "
            f"{_cell(row['llama_server'])} | {row['vs_single']['llama_server']} | {_cell(row['ratio'])} |"
        )
    met = "met" if c["local_llama_vs_single_at_top"] >= c["goal"] else "missed"
    lines += [
        "",
        f"Goal: local_llama at {c['top_level']} concurrent ≥ {c['goal']:g}× its single-request tokens/s: "
        f"{c['local_llama_vs_single_at_top']}× ({met}).",
        "",
    ]
    q = c.get("quickstart")
    if q:
        lines += [
            "The quickstart's shape (README command 1: `gym collect --serve math_local.yaml --repeats 4`, 60 rollouts, "
            "temperature 0.7, ≤ 200 tokens; collection only, without start-up):",
            "",
            "| model server | rollouts/s | runs (load average at the end) |",
            "| --- | --- | --- |",
        ]
        for name, figure in q.items():
            runs = ", ".join(f"{r['rollouts_per_s']} ({r['load']})" for r in figure["runs"])
            lines.append(f"| {name} | {_cell(figure)} | {runs} |")
        lines.append("")
    return lines


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"# gym benchmarks ({results['size']})",
        "",
        f"load average before: {results['load_before']}, after: {results['load_after']}; {results['machine']}",
        "",
    ]
    orch = results.get("orchestration")
    if orch:
        lines += [
            "## Orchestration overhead vs the HTTP floor",
            "",
            "Floor: bare round trips by an aiohttp client; floor (gym transport): the same by "
            "`gym_core.http1`, the client gym's servers use. Each figure is the median over the rounds "
            "(of two, their mean), with the min–max of the rounds in brackets.",
            "",
            "| variant | round trips | concurrency | gym rollouts/s | floor rollouts/s | ratio "
            "| floor (gym transport) rollouts/s | ratio | gym p50 ms | gym p99 ms "
            "| gym CPU ms/rollout | floor CPU ms/rollout | errors |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for variant, rows in orch["variants"].items():
            for row in rows:
                g, f, lean = row["gym"], row["floor"], row["floor_gym_transport"]
                lines.append(
                    f"| {variant} | {orch['round_trips'][variant]} | {row['concurrency']} | {_spread(g, 'rollouts_per_s')} | "
                    f"{_spread(f, 'rollouts_per_s')} | {_spread(row, 'ratio')} | {_spread(lean, 'rollouts_per_s')} | "
                    f"{_spread(row, 'ratio_gym_transport')} | "
                    f"{g['p50_ms']} | {g['p99_ms']} | {g['cpu_ms_per_rollout']} | {f['cpu_ms_per_rollout']} | "
                    f"{g['errors'] + f['errors'] + lean['errors']} |"
                )
        lines.append("")
    if "strict_floor" in results:
        from benchmarks.strict_floor import markdown as strict_floor_markdown

        lines += strict_floor_markdown(results["strict_floor"])
    if "startup" in results:
        s = results["startup"]
        lines += [
            '## Start-up (`gym run` to "All servers ready")',
            "",
            "| mode | seconds |",
            "| --- | --- |",
            f"| isolated, cold (envs built) | {s['uv_cold_s'] or '—'} |",
            f"| isolated, warm | {s['uv_warm_s'] or '—'} |",
            f"| --isolation none | {s['none_s']} |",
            "",
        ]
    if "scale" in results:
        s = results["scale"]
        rss = s["counter_rss_mb"]
        lines += [
            "## Scale",
            "",
            f"{s['in_flight']} rollouts started at once (at most {s['peak_in_flight']} seen in flight "
            f"together), {s['connections_to_agent']} of them in the agent at a time (its open file descriptors "
            f"peaked at {s['agent_peak_open_fds']}), the others waiting for a connection: {s['completed']} completed, "
            f"{s['written']} written, {s['errors']} errors, {s['retried']} retried, {s['seconds']} s "
            f"({s['rollouts_per_s']} rollouts/s). Sessions held by the counter: {s['sessions_before']['counter']} "
            f"before, at most {s['peak_counter_sessions']} during, {s['sessions_after']['counter']} after; its RSS "
            f"{rss['before']} MiB before, {rss['after']} MiB after (peak {rss['peak']}).",
            "",
            "| process | peak RSS MiB | CPU s |",
            "| --- | --- | --- |",
        ]
        lines += [f"| {name} | {mb} | {s['cpu_s'].get(name, '—')} |" for name, mb in s["peak_rss_mb"].items()] + [""]
    if "scale_100k" in results:
        s = results["scale_100k"]
        lines += [
            f"## {s['in_flight']:,} rollouts in flight (scale_100k)",
            "",
            f"One collector process (`gym collect`'s, its client settings), one rollout of each of "
            f"{s['in_flight']:,} tasks ({s['input_mb']} MB of JSONL), all in flight; a minimal agent answers each "
            f"`/run` after {s['delay_s']} s (its peak RSS {s['agent_peak_rss_mb']} MiB). {s['connections']:,} "
            "connections to the agent: that many send at once, the others wait their turn. Rollout deadline "
            f"{s['deadline_s']:g} s, shorter than the run: a deadline that counted the wait would fail the last "
            f"rollouts. Goal: peak RSS under {s['goal_mb']} MB, no rollout failed.",
            "",
            "| collector | commit | peak RSS MiB | RSS before the run MiB | KiB per rollout in flight | peak in flight "
            "| peak waiting | done | failed | s | rollouts/s | wait p99 s | latency p99 s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, r in s["runs"].items():
            lines.append(
                f"| {name} | {r['commit']} | {r['peak_rss_mb']} | {r['rss_before_mb']} | {r['kib_per_rollout']} "
                f"| {r['peak_in_flight']} | {'—' if r['peak_queued'] is None else r['peak_queued']} | {r['done']} "
                f"| {r['failed']} | {r['seconds']} | {r['rollouts_per_s']} | {_round(r['queue_p99_s'])} "
                f"| {_round(r['latency_p99_s'])} |"
            )
        lines.append("")
    if "model_overhead" in results:
        m = results["model_overhead"]
        lines += [
            "## Model-server overhead (local_llama)",
            "",
            "| path | tokens/s |",
            "| --- | --- |",
            f"| through the framework (HTTP /v1/responses) | {m['framework_tokens_per_s']} |",
            f"| llama engine in-process | {m['direct_tokens_per_s']} |",
            "",
            f"overhead: {m['overhead_pct']} % (completion tokens {m['completion_tokens']})",
            "",
        ]
    if "worker_pool" in results:
        w = results["worker_pool"]
        lines += [
            "## Worker pool (gym_core.workers)",
            "",
            "| call | ms |",
            "| --- | --- |",
            f"| async call of a trivial function | {w['async_call_ms']} |",
            f"| blocking call of a trivial function | {w['blocking_call_ms']} |",
            f"| kill a worker past its limit and replace it | {w['kill_and_replace_ms']} |",
            f"| math verify_answer needing a worker | {w.get('math_verify_call_ms', '—')} |",
            "",
        ]
    if "verify_throughput" in results:
        v = results["verify_throughput"]
        levels = sorted({int(c) for rows in v.values() for c in rows})
        lines += [
            "## Verify throughput per environment (POST /verify, example rows cycled)",
            "",
            "| environment | " + " | ".join(f"c={c} verif/s | c={c} p99 ms" for c in levels) + " | errors | correct |",
            "| --- |" + " --- | --- |" * len(levels) + " --- | --- |",
        ]
        for name, rows in v.items():
            cells = " | ".join(f"{rows[str(c)]['per_s']} | {rows[str(c)]['p99_ms']}" for c in levels)
            # correct: the share of verifications that got their row's conformance reward, all rounds
            checked = sum(r.get("checked", 0) for r in rows.values())
            right = sum(r.get("matched", 0) for r in rows.values())
            correct = f"{right / checked:.3f}" if checked else "—"
            lines.append(f"| {name} | {cells} | {sum(r['errors'] for r in rows.values())} | {correct} |")
        lines += [
            "",
            "correct: the share of verifications that got the reward of their row's `conformance` field "
            "(— : no row has one).",
            "",
        ]
    if "reliability" in results:
        lines += [
            "## Reliability under faults",
            "",
            "| scenario | rollouts expected | rows written | duplicates | lost | failures recorded | seconds |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in results["reliability"]["scenarios"]:
            failures = f"{row['failures']} ({', '.join(row['failure_reasons'])})" if row["failures"] else "0"
            lines.append(
                f"| {row['scenario']} | {row['expected']} | {row['rows']} | {row['duplicates']} | {row['lost']} "
                f"| {failures} | {row['seconds']} |"
            )
            if "rss_before_mb" in row:
                lines.append(
                    f"| ↳ counter RSS MiB before → after | | {row['rss_before_mb']} → {row['rss_after_mb']} | | | | |"
                )
        lines.append("")
    if "token_faithfulness" in results:
        t = results["token_faithfulness"]
        lines += [
            "## Token faithfulness of multi-turn rollouts (local_llama)",
            "",
            f"{t['rollouts']} rollouts of {t['turns_per_rollout']} model calls "
            f"(≤ {'/'.join(map(str, t['max_output_tokens']))} tokens, "
            f"{t['model_tool_calls']} tool calls made), {t['seconds']} s (rescoring {t['rescore_seconds']} s): "
            f"{t['drifted_tokens']} drifted tokens of "
            f"{t['history_tokens_compared']} earlier-turn tokens compared (must be 0); "
            f"{t['log_prob_mismatches']} of {t['generated_tokens_rescored']} returned log-probs differ from the "
            f"engine's recomputed ones (max |Δ| {t['max_log_prob_abs_diff']}).",
            "",
        ]
    if "sandbox" in results:
        b = results["sandbox"]
        lines += [
            "## Sandbox (gym_core.sandbox): a trivial Python program",
            "",
            "| concurrency | bare subprocess exec/s | sandboxed exec/s | bare p50 ms | sandboxed p50 ms | sandboxed p99 ms |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for c in ("1", "8"):
            bare, box = b[c]["bare"], b[c]["sandbox"]
            lines.append(
                f"| {c} | {bare['per_s']} | {box['per_s']} | {bare['p50_ms']} | {box['p50_ms']} | {box['p99_ms']} |"
            )
        lines += [
            "",
            f"overhead per execution over a bare subprocess (p50, concurrency 1): {b['overhead_ms']} ms "
            f"({b['executions']} executions × {b['rounds']} rounds each)",
            "",
        ]
    if "repo" in results:
        r = results["repo"]
        trip, v, g = r["round_trip"], r["verify"], r["generate"]
        met = "met" if r["pool_overhead_ms"] < r["goal_overhead_ms"] else "missed"
        lines += [
            "## repo: a sandboxed command, a verification, task generation",
            "",
            f"`run_command`'s path without HTTP over a generated task's workspace ({r['files']} files), "
            f"{r['round_trips']} sequential round trips × {r['rounds']} rounds per way, interleaved:",
            "",
            "| way | p50 ms | p99 ms | p50 over bare ms |",
            "| --- | --- | --- | --- |",
        ]
        for way, label in (
            ("bare", "bare `sh -c true`"),
            ("pool", "`sandbox_pool` (default)"),
            ("sandbox", "a sandbox per command"),
        ):
            over = round(trip[way]["p50_ms"] - trip["bare"]["p50_ms"], 1)
            lines.append(f"| {label} | {trip[way]['p50_ms']} | {trip[way]['p99_ms']} | {over} |")
        lines += [
            "",
            f"overhead per command with the pool: {r['pool_overhead_ms']} ms (goal under {r['goal_overhead_ms']} ms: "
            f"{met}); verify of a generated task ({v['tests']} hidden tests): median {v['median_s']} s of "
            f"{v['runs']} (max {v['max_s']} s); generation: {g['tasks']} tasks in {g['seconds']} s, "
            f"{g['per_min']} tasks/min (concurrency 2)",
            "",
        ]
    if "collect_memory" in results:
        c = results["collect_memory"]
        lines += [
            f"## Streaming collection (`gym collect --repeats {c['repeats']}`, interrupted after {c['stop_after_rows']} rows)",
            "",
            "| input tasks | input MiB | collector peak RSS MiB | seconds to the first row |",
            "| --- | --- | --- | --- |",
        ]
        lines += [
            f"| {row['tasks']} | {row['input_mb']} | {row['peak_rss_mb']} | {row['first_row_s']} |"
            for row in c["inputs"]
        ]
        r = c["resume"]
        lines += [
            "",
            f"resume over {r['done_rows']} done rows ({r['output_mb']} MiB of output, {r['tasks']} tasks): first new "
            f"row after {r['first_new_row_s']} s, peak RSS {r['peak_rss_mb']} MiB",
            "",
        ]
    if "local_llama_batch" in results:
        b = results["local_llama_batch"]
        lines += [
            "## Batched decoding (local_llama)",
            "",
            f"Concurrent greedy requests of {b['max_tokens']} tokens (prompts in the prefix cache), in process, "
            f"{b['n_threads']} llama.cpp thread(s), median of {b['rounds']} round(s).",
            "",
            "| weights | concurrency | tokens/s | × single | CPU tokens/s | × single (CPU) | sequences per step |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for fmt, f in b["formats"].items():
            for c, row in f["levels"].items():
                lines.append(
                    f"| {fmt} | {c} | {row['batched_tokens_per_s']} | {row['vs_single']} | {row['cpu_tokens_per_s']} "
                    f"| {row['cpu_vs_single']} | {row['mean_sequences_per_step']} |"
                )
        lines += (
            [""]
            + [
                f"{fmt} ({f['weights']}): unbatched engine at {b['top_level']} concurrent {f['unbatched_tokens_per_s']} "
                f"tokens/s; same tokens batched and unbatched: {'yes' if f['identical_tokens'] else 'NO'}."
                for fmt, f in b["formats"].items()
            ]
            + [""]
        )
        r = b.get("repeats")
        if r:
            lines += [
                f"Repeats (the shape of `gym collect --repeats {r['repeats']}`): {r['prompts']} fresh prompt(s) a round, "
                f"each sent {r['repeats']} times at once, temperature 0.7, {r['max_tokens']} tokens, "
                f"{r['n_threads']} llama.cpp thread(s), median of "
                f"{r['rounds']} round(s): batched {r['batched_requests_per_s']} requests/s, unbatched "
                f"{r['unbatched_requests_per_s']} (× {r['ratio']}); the batched engine copied "
                f"{r['shared_prompt_tokens']} of {r['prompt_tokens']} prompt tokens from another slot.",
                "",
            ]
    if "local_model_vs_llama_server" in results:
        lines += _local_model_vs_llama_server(results["local_model_vs_llama_server"])
    if "replicas" in results:
        r = results["replicas"]
        where = (
            "on a local Ray cluster, each replica in an actor reserving 1 CPU"
            if r["ray"]
            else "local processes, no Ray"
        )
        lines += [
            f"## Throughput with replicas (counter environment, {where})",
            "",
            f"Concurrency {r['concurrency']}, median of {r['rounds']} round(s) (min–max in brackets); "
            f"start-up of all levels {r['launch_s']} s. "
            "Session share: each replica's part of the open sessions sampled through the round.",
            "",
            "| replicas | rollouts/s | p50 ms | p99 ms | errors | session share per replica | CPU s per replica |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {row['replicas']} | {_spread(row, 'rollouts_per_s')} | {row['p50_ms']} | {row['p99_ms']} | {row['errors']} | "
            f"{' / '.join(map(str, row['session_share']))} | {' / '.join(map(str, row['replica_cpu_s']))} |"
            for row in r["levels"]
        ]
        lines += [
            "",
            f"Routing a rollout's call (`ServerClient.route`, rendezvous hash) vs one loopback round trip "
            f"(`GET /health`, {r['loopback_us']} µs):",
            "",
            "| replicas | µs per call | % of a round trip | fresh keys | least / most loaded replica vs even |",
            "| --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {n} | {row['route_us']} | {row['pct_of_round_trip']} | {row['keys']} | "
            f"{row['min_share_of_even']} / {row['max_share_of_even']} |"
            for n, row in r["routing"].items()
        ] + [""]
    if "trainer_overhead" in results:
        t = results["trainer_overhead"]
        lines += [
            "## What gym's verification adds to a TRL GRPO step (SmolLM2-135M, CPU)",
            "",
            f"{t['steps']} steps × {t['repeats']} run(s) per variant, {t['batch']} completions a step "
            f"(≤ {t['max_completion_length']} tokens), rewards of math's example tasks; same weights, seed and "
            f"data, so the same completions (same rewards in both: {'yes' if t['same_rewards'] else 'NO'}).",
            "",
            "| rewards from | step s (mean) | step s (median) | reward s per step |",
            "| --- | --- | --- | --- |",
            f"| gym's math server (/verify over HTTP) | {t['gym_step_s']} | {t['gym_step_median_s']} "
            f"| {t['gym_reward_s_per_step']} |",
            f"| the same grader in-process | {t['in_process_step_s']} | {t['in_process_step_median_s']} "
            f"| {t['in_process_reward_s_per_step']} |",
            "",
            f"step ratio {t['ratio']} (median {t['median_ratio']}: the noise of the step's own timing); gym's reward call is "
            f"{t['gym_reward_share_pct']} % of a step and adds {t['added_pct']} % over the in-process grader. "
            f"32 completions verified one at a time: {t['concurrency_1_s']} s, 32 at once: "
            f"{t['concurrency_32_s']} s (× {t['concurrency_speedup']}).",
            "",
        ]
    if "vllm_gpu" in results:
        lines += _vllm_gpu(results["vllm_gpu"])
    if "code_gen_throughput" in results:
        c = results["code_gen_throughput"]
        m = c["64"]
        lines += [
            "## code_gen verifications (code_gen_throughput)",
            "",
            f"{c['rows']} NeMo-style rows ({c['tests_per_row']} unit tests each), cycled, at concurrency 64:",
            "",
            "| verif/s | p50 ms | p99 ms | errors | correct | hidden tests in rows |",
            "| --- | --- | --- | --- | --- | --- |",
            f"| {m['per_s']} | {m['p50_ms']} | {m['p99_ms']} | {m['errors']} | {m['correct']} | "
            f"{c['hidden_tests_in_rows']} |",
            "",
        ]
    return "\n".join(lines)


def _vllm_gpu(v: dict[str, Any]) -> list[str]:
    lines = [
        "## vLLM on a GPU (vllm_gpu)",
        "",
        f"{v['device']}; model {v['model']} (bfloat16, converted from the shipped GGUF), each of three engines "
        f"on {v['gpu_share']} of the GPU's memory. Engines ready in {v['engine_ready_s']['b']} s and "
        f"{v['engine_ready_s']['c']} s (`vllm serve`); "
        + (
            f"`gym run` with local_vllm_model's engine in a Ray placement group ready in "
            f"{v['gym_run_with_ray_engine_ready_s']} s."
            if "gym_run_with_ray_engine_ready_s" in v
            else f"local_vllm_model's engine did not start: {v.get('ray_engine_error', '?')[-300:]}"
        ),
        "",
    ]
    for what, error in (v.get("errors") or {}).items():
        lines += [f"- {what} failed: {error[-300:]}"]
    q = v.get("quickstart") or {}
    done = q.get("done_event") or {}
    if done:
        lines += [
            f"Quickstart through vLLM (`{q['command']}`): {done.get('done')} rollouts, {done.get('failed')} failed, "
            f"{round(done.get('rollouts_per_s', 0), 1)} rollouts/s, mean reward {round(done.get('mean_reward', 0), 4)}.",
            "",
        ]
    if v.get("levels"):
        lines += [
            "| concurrent rollouts | rollouts | gym tokens/s | gym rollouts/s | direct to vLLM tokens/s | gym / direct | errors |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for level, row in v["levels"].items():
            g, d = row["gym"], row["direct"]
            lines.append(
                f"| {level} | {g['rollouts']} | {g['tokens_per_s']} | {g['rollouts_per_s']} | {d['tokens_per_s']} | "
                f"{row['ratio']} | {g['errors']} + {d['errors']} |"
            )
        lines.append("")
    if v.get("affinity"):
        lines += [
            "| replicas routing (2 engines) | chats × turns | tokens/s | p50 ms per call | prefix-cache hit rate | errors |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for arm, row in v["affinity"].items():
            name = "session-affine (cookie kept)" if arm == "affine" else "no affinity (a new session per call)"
            lines.append(
                f"| {name} | {row['chats']} × {row['turns']} | {row['tokens_per_s']} | {row['p50_ms']} | "
                f"{row['prefix_hit_rate']} | {row['errors']} |"
            )
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    # Measurements stop gym collect with SIGINT (Ctrl+C): a shell's background job starts with SIGINT
    # ignored, which every child would inherit. Children start with the default instead.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "small", "full"), default="full")
    parser.add_argument("--only", nargs="+", choices=MEASUREMENTS + OPTIONAL, default=list(MEASUREMENTS))
    parser.add_argument(
        "--environments",
        nargs="+",
        metavar="TYPE",
        default=None,
        help="verify_throughput: only these resources server types (default: the size's)",
    )
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {
        "size": args.size,
        "load_before": load(),
        "machine": f"{platform.machine()}, Python {platform.python_version()}",
    }
    for name in args.only:
        print(f"running {name} ({args.size})…", file=sys.stderr, flush=True)
        start = time.perf_counter()
        module = importlib.import_module(f"benchmarks.{name}")
        if name == "verify_throughput" and args.environments:
            results[name] = module.run(args.size, tuple(args.environments))
        else:
            results[name] = module.run(args.size)
        print(f"  {name} done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    results["load_after"] = load()
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "results.json").write_text(json.dumps(results, indent=2))
    (args.output / "results.md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
