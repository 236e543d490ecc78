"""``gym train`` end to end: the real command (found through the ``gym`` entry point), real servers,
the real model, one tiny GRPO step, the new policy served and collected from.

One asynchronous run (4 tasks x 4 repeats, 2 steps, max staleness 1, 12 tokens per answer) is shared
by the tests of this module: round 0 and round 1 are collected on the base policy (round 1 while step 1
trains), step 2 trains on round 1 one version behind, and round 2 (the evaluation round) on the policy
of step 2. Synchronous mode is the same code with staleness 0. A step learns only from a group whose
rewards differ (else every advantage is 0): the base model answers
about half of these within the limit, so 4 groups of 4 all alike would take odds of ~1 in 1000."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gym_train.loop import TrainError, rollout_sample
from gym_train.model import default_gguf_path

pytestmark = pytest.mark.timeout(900)


def _gym_train(out: Path, *args: str, timeout_s: float = 840) -> subprocess.CompletedProcess:
    """``gym train --output OUT ARGS...`` to its end; the result's ``pid`` is the command's process."""
    env = {k: v for k, v in os.environ.items() if k not in ("GYM_PLUGINS", "GYM_DISABLE_PLUGINS")}
    with subprocess.Popen(
        [sys.executable, "-m", "gym_cli", "train", "--output", str(out), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
    ) as popen:
        try:
            stdout, stderr = popen.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            popen.kill()
            stdout, stderr = popen.communicate()
            pytest.fail(f"gym train ran past {timeout_s} s:\n{stderr[-6000:]}")
    proc = subprocess.CompletedProcess(popen.args, popen.returncode, stdout, stderr)
    proc.pid = popen.pid  # type: ignore[attr-defined]
    return proc


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("train") / "run"
    proc = _gym_train(
        out,
        "--steps",
        "2",
        "--repeats",
        "4",
        "--limit",
        "4",
        "--max-output-tokens",
        "12",
        "--learning-rate",
        "1e-4",
        "--mode",
        "async",
        "--max-staleness",
        "1",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return out, proc


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_rollouts_file_holds_both_rounds_versioned_and_token_faithful(run):
    out, _ = run
    rows = _rows(out / "rollouts.jsonl")
    # Rounds 0 and 1 on the base policy (1 overlapped step 1), round 2 (evaluation) on step 2's policy.
    assert (
        sorted((r["train_round"], r["policy_version"]) for r in rows) == [(0, 0)] * 16 + [(1, 0)] * 16 + [(2, 2)] * 16
    )
    # Rollout indices run on across rounds: (task, rollout) names one row.
    assert len({(r["task_index"], r["rollout_index"]) for r in rows}) == 48
    assert {r["rollout_index"] for r in rows if r["train_round"] == 2} == {8, 9, 10, 11}
    for row in rows:
        sample = rollout_sample(row, 0)
        assert sample is not None and 1 <= len(sample["generation_token_ids"]) <= 12
        assert len(sample["generation_log_probs"]) == len(sample["generation_token_ids"])
        assert row["reward"] in (0.0, 1.0)


def test_the_new_policy_is_served_after_the_step(run):
    """local_llama loaded the trainer's GGUF: the evaluation round's rows name it as their model."""
    out, _ = run
    models = {(r["train_round"], r["model"]) for r in _rows(out / "rollouts.jsonl")}
    assert models == {(0, "SmolLM2-135M-Instruct"), (1, "SmolLM2-135M-Instruct"), (2, "policy-v2")}, models


def test_the_written_gguf_holds_the_trained_weights(run):
    """The steps moved the weights by about the learning rate each (AdamW): the GGUF differs from the
    base model's weights, but only by that much (not garbage, not the base)."""
    from gguf import GGUFReader

    out, _ = run
    steps = _rows(out / "steps.jsonl")
    # Step 2 trained on round 1, collected by version 0 while step 1 ran: one version stale.
    assert [(s["step"], s["round"], s["rollout_policy_version"], s["staleness"]) for s in steps] == [
        (1, 0, 0, 0),
        (2, 1, 0, 1),
    ]
    assert all(s["num_rollouts"] == 16 for s in steps)
    assert steps[0]["grad_norm"] > 0, "no group had rewards that differ: nothing to learn from"
    trained = {t.name: t for t in GGUFReader(out / "policy" / "policy-v2.gguf").tensors}
    base = {t.name: t for t in GGUFReader(default_gguf_path()).tensors}
    name = "blk.0.attn_norm.weight"  # float32 in both files, same layout
    before = np.asarray(base[name].data, dtype=np.float32)
    after = np.asarray(trained[name].data, dtype=np.float32)
    change = np.abs(after - before)
    assert change.max() > 1e-6, "the GGUF holds the base weights: the step was not saved"
    assert change.max() < 1e-2, f"the weights moved by {change.max()}, far more than two steps at lr 1e-4"


def test_the_summary_reports_before_after_and_throughput(run):
    out, proc = run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "async" and summary["steps"] == 2 and summary["train_rollouts"] == 32
    assert [r["evaluation"] for r in summary["rounds"]] == [False, False, True]
    assert summary["reward_before"] == summary["rounds"][0]["mean_reward"]
    assert summary["reward_after"] == summary["rounds"][2]["mean_reward"]
    assert summary["stream_counts"]["dropped_stale"] == 0 and summary["stream_counts"]["malformed"] == 0
    assert isinstance(summary["rollouts_per_s"], float) and summary["train_tokens"] > 0
    assert (out / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "reward" in proc.stderr and "rollouts/s" in proc.stderr
    # The default backend: the model worker is a process of its own, not the command's.
    assert summary["trainer"]["backend"] == "process" and summary["trainer"]["ray_node"] is None
    assert summary["trainer"]["pid"] not in (proc.pid, None)
    assert f"in process {summary['trainer']['pid']}" in proc.stderr


def test_sync_mode_with_the_trainer_in_a_ray_actor(tmp_path):
    """--backend ray: the same loop with the model worker hosted by a Ray actor (a local Ray started
    for the run and stopped after it), here in sync mode: collect, step, serve, collect."""
    out = tmp_path / "run"
    proc = _gym_train(
        out,
        "--steps",
        "1",
        "--repeats",
        "2",
        "--limit",
        "2",
        "--max-output-tokens",
        "8",
        "--mode",
        "sync",
        "--backend",
        "ray",
        "--trainer-resources",
        '{"num_cpus": 1}',
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    summary = json.loads((out / "summary.json").read_text())
    trainer = summary["trainer"]
    assert trainer["backend"] == "ray" and len(trainer["ray_node"]) == 56  # a Ray node id: 28 bytes in hex
    assert trainer["pid"] not in (proc.pid, None)
    assert f"a Ray actor on node {trainer['ray_node'][:12]}" in proc.stderr
    rows = _rows(out / "rollouts.jsonl")
    # Sync: round 1 (the evaluation round) waited for step 1's policy and was collected on it.
    assert sorted((r["train_round"], r["policy_version"], r["model"]) for r in rows) == (
        [(0, 0, "SmolLM2-135M-Instruct")] * 4 + [(1, 1, "policy-v1")] * 4
    )
    [step] = _rows(out / "steps.jsonl")
    assert (step["step"], step["round"], step["staleness"], step["num_rollouts"]) == (1, 0, 0, 4)
    assert Path(step["gguf"]).is_file()  # written by the actor, on this (its) node


@pytest.mark.parametrize(
    "args, says",
    [
        (["--trainer-resources", '{"num_gpus": 1}'], "are for --backend ray"),
        (["--ray-address", "127.0.0.1:6379"], "are for --backend ray"),
        (["--backend", "ray", "--trainer-resources", "[1]"], "a JSON object is wanted"),
        (["--backend", "ray", "--trainer-resources", "{gpus"], "not JSON"),
        (["--backend", "ray", "--trainer-resources", '{"gpus": 1}'], "unknown option 'gpus'"),
    ],
)
def test_ray_options_are_checked_before_anything_starts(tmp_path, args, says):
    proc = _gym_train(tmp_path / "run", "--steps", "1", *args, timeout_s=120)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "rollouts.jsonl").exists()


def test_a_row_without_token_ids_is_refused():
    row = {
        "task_index": 3,
        "rollout_index": 1,
        "reward": 1.0,
        "response": {"output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}]},
    }
    with pytest.raises(TrainError, match="task 3, rollout 1.*token_preserving"):
        rollout_sample(row, 0)


def test_an_existing_output_is_refused_before_anything_starts(tmp_path):
    (tmp_path / "rollouts.jsonl").write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "gym_cli", "train", "--output", str(tmp_path), "--steps", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stderr
    assert "exists" in proc.stderr and "fresh --output" in proc.stderr
