"""--track on gym profile and gym collect, against the real trackers offline: MLflow's local file store
read back through its own client, a Weights & Biases offline run read back from the records it wrote;
a missing extra is a usage error naming the pip install."""

from __future__ import annotations

import json
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from gym_core.testing import running_servers, wait_until

from gym_cli.tracking import metric_name

ROOT = Path(__file__).resolve().parents[3]
ROLLOUTS = ROOT / "plugins/resources/blackjack/data/example_rollouts.jsonl"
COUNTER_TASKS = ROOT / "plugins/resources/counter/data/example.jsonl"
TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]
OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}


@pytest.fixture
def rollouts(tmp_path) -> Path:
    """The recorded blackjack rollouts, copied: the profile is written next to them."""
    return Path(shutil.copy(ROLLOUTS, tmp_path / "rollouts.jsonl"))


@pytest.fixture
def offline(monkeypatch) -> None:
    """W&B offline and quiet; no MLflow URI, nor MLflow 3's file-store switch, which gym sets itself
    (set then removed: monkeypatch puts back what was there, so what gym sets ends with the test)."""
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)


def mlflow_runs(store: Path) -> list:
    import mlflow

    client = mlflow.MlflowClient(store.resolve().as_uri())
    experiment = client.get_experiment_by_name("gym")
    assert experiment is not None
    return client.search_runs([experiment.experiment_id])


def wandb_records(directory: Path) -> list:
    """Every record of the one offline run under ``directory``, decoded with wandb's own protobuf
    types; the file is a LevelDB-style log: a 7-byte header, then 32 KiB blocks of chunks, each with
    a 7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    (path,) = directory.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pending, offset = [], b"", 7
    while offset + 7 <= len(data):
        room = 32768 - offset % 32768
        if room < 7:  # a block's tail too small for a header is padding
            offset += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        if offset + 7 + length > len(data):  # still being written
            break
        chunk = data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        if kind == 0 and length == 0:
            continue
        pending += chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_logged(directory: Path) -> tuple[dict[str, float], list[str]]:
    """The metrics an offline run logged (its history) and the names of the artifacts it logged, once
    wandb's service (a process of its own, writing after ``finish`` returns) wrote the run's end."""
    records = wait_until(
        lambda: (found := wandb_records(directory)) and found[-1].WhichOneof("record_type") == "exit" and found,
        "the offline run's exit record",
    )
    metrics: dict[str, float] = {}
    artifacts: list[str] = []
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                if not key.startswith("_"):
                    metrics[key] = json.loads(item.value_json)
        elif kind == "artifact":
            artifacts.append(record.artifact.name)
    return metrics, artifacts


def test_metric_names_are_valid_in_both_trackers():
    assert metric_name("pass@4") == "pass_at_4"
    assert metric_name("mcqa/pass@1[avg-of-4]/accuracy") == "mcqa/pass_at_1_avg-of-4/accuracy"
    assert metric_name("env/a b:c@d/mean_reward") == "env/a b_c_at_d/mean_reward"
    assert metric_name("env/../mean_reward") == "env/_/mean_reward"  # MLflow refuses names that resolve elsewhere


def test_profile_tracked_to_mlflow(gym, rollouts, tmp_path, offline):
    result = gym("profile", str(rollouts), "--track", "mlflow", "--track-dir", str(tmp_path / "t"), "--run-name", "p1")
    assert result.exit_code == 0, result.output
    profile = json.loads((tmp_path / "rollouts.profile.json").read_text())
    (run,) = mlflow_runs(tmp_path / "t/mlruns")
    metrics = run.data.metrics
    overall = profile["overall"]
    assert metrics["mean_reward"] == overall["mean_reward"]
    assert metrics["num_rollouts"] == overall["num_rollouts"] == 6  # the headline's denominator
    assert metrics["num_tasks"] == overall["num_tasks"]
    assert metrics["pass_at_1"] == overall["pass@1"]
    assert metrics["env/blackjack/mean_reward"] == profile["environments"]["blackjack"]["mean_reward"]
    assert metrics["tokens_per_rollout/total"] == overall["tokens_per_rollout"]["total"]
    assert run.info.run_name == "p1" and run.info.status == "FINISHED"
    assert run.data.tags["command"] == "gym profile"
    import mlflow

    client = mlflow.MlflowClient((tmp_path / "t/mlruns").resolve().as_uri())
    logged = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert logged == {"rollouts.profile.json", "rollouts.jsonl"}
    copy = Path(client.download_artifacts(run.info.run_id, "rollouts.profile.json", str(tmp_path / "dl")))
    assert json.loads(copy.read_text())["overall"] == overall


def test_the_environments_own_metrics_are_tracked(gym, tmp_path, offline):
    """mcqa's recorded rollouts: its aggregate metrics (the pass@k family, in percent) under metrics/."""
    rollouts = Path(shutil.copy(ROOT / "plugins/resources/mcqa/data/example_rollouts.jsonl", tmp_path / "mc.jsonl"))
    result = gym("profile", str(rollouts), "--track", "mlflow", "--track-dir", str(tmp_path / "t"))
    assert result.exit_code == 0, result.output
    own = json.loads((tmp_path / "mc.profile.json").read_text())["plugin_metrics"]
    (run,) = mlflow_runs(tmp_path / "t/mlruns")
    metrics = run.data.metrics
    assert metrics["metrics/mcqa.pass_at_1.accuracy"] == own["mcqa/pass@1/accuracy"]
    assert metrics["metrics/mcqa.pass_at_1_avg-of-1.no_answer"] == own["mcqa/pass@1[avg-of-1]/no_answer"]
    # a metric and one nested below it, both kept (MLflow's file store holds a metric as a file)
    accuracy = "metrics/mcqa.pass_at_1_avg-of-1.accuracy"
    assert metrics[accuracy] == own["mcqa/pass@1[avg-of-1]/accuracy"]
    assert metrics[accuracy + ".std_dev_across_runs"] == own["mcqa/pass@1[avg-of-1]/accuracy/std_dev_across_runs"]
    assert metrics["metrics/mcqa.majority_at_1.accuracy"] == own["mcqa/majority@1/accuracy"]
    assert sum(name.startswith("metrics/") for name in metrics) == len(own)


def test_profile_tracked_to_mlflow_tracking_uri(gym, rollouts, tmp_path, offline, monkeypatch):
    store = tmp_path / "elsewhere"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    result = gym("profile", str(rollouts), "--track", "mlflow")
    assert result.exit_code == 0, result.output
    (run,) = mlflow_runs(store)
    assert run.data.metrics["num_rollouts"] == 6


def test_profile_tracked_to_wandb_offline(gym, rollouts, tmp_path, offline):
    result = gym("profile", str(rollouts), "--track", "wandb", "--track-dir", str(tmp_path / "t"))
    assert result.exit_code == 0, result.output
    profile = json.loads((tmp_path / "rollouts.profile.json").read_text())
    metrics, artifacts = wandb_logged(tmp_path / "t")
    assert metrics["mean_reward"] == profile["overall"]["mean_reward"]
    assert metrics["num_rollouts"] == 6
    assert metrics["pass_at_1"] == profile["overall"]["pass@1"]
    assert metrics["env/blackjack/num_tasks"] == profile["environments"]["blackjack"]["num_tasks"]
    assert sorted(artifacts) == ["rollouts.jsonl", "rollouts.profile.json"]
    assert "tracked (wandb): run " in result.output


@pytest.mark.parametrize("backend", ["mlflow", "wandb"])
def test_a_missing_extra_is_a_usage_error_naming_the_install(gym, rollouts, tmp_path, monkeypatch, backend):
    monkeypatch.setitem(sys.modules, backend, None)  # as if not installed: importing it fails
    result = gym("profile", str(rollouts), "--track", backend, "--track-dir", str(tmp_path / "t"))
    assert result.exit_code == 2
    assert f"pip install 'gym-cli[{backend}]'" in result.output
    assert not (tmp_path / "rollouts.profile.json").exists()  # refused before any work
    assert not (tmp_path / "t").exists()


def test_a_store_that_cannot_be_opened_is_a_usage_error_before_any_work(gym, rollouts, tmp_path, offline, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuchscheme://here")
    result = gym("profile", str(rollouts), "--track", "mlflow")
    assert result.exit_code == 2
    assert "--track mlflow: cannot start a run" in result.output and "nosuchscheme" in result.output
    assert not (tmp_path / "rollouts.profile.json").exists()


def test_collect_tracks_its_counts_and_profile(gym, tmp_path, offline, monkeypatch):
    monkeypatch.delenv("WANDB_SILENT")  # wandb says what it does: on stderr, never among the JSON events
    config = {
        "counter": {"plugin": "counter"},
        "policy": {"plugin": "scripted", "turns": TURNS},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
    }
    out = tmp_path / "out.jsonl"
    with running_servers(config) as served:
        result = gym(
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--repeats",
            "2",
            "--head",
            served.head_url,
            "--progress",
            "json",
            "--track",
            "mlflow",
            "--track",
            "wandb",
            "--track-dir",
            str(tmp_path / "t"),
        )
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[-1]["event"] == "done"
    assert "tracked (wandb): run " in result.stderr and "tracked (mlflow): run " in result.stderr
    profile = json.loads((tmp_path / "out.profile.json").read_text())
    n = len(COUNTER_TASKS.read_text().splitlines()) * 2
    (run,) = mlflow_runs(tmp_path / "t/mlruns")
    metrics = run.data.metrics
    assert metrics["collect/done"] == n and metrics["collect/failed"] == 0
    assert metrics["mean_reward"] == profile["overall"]["mean_reward"] == metrics["collect/mean_reward"]
    assert run.data.params["repeats"] == "2"
    logged, artifacts = wandb_logged(tmp_path / "t")
    assert logged["collect/done"] == n
    assert logged["mean_reward"] == profile["overall"]["mean_reward"]
    assert sorted(artifacts) == ["out.jsonl", "out.profile.json"]  # no failures file: nothing failed


def test_a_collection_with_failed_rollouts_logs_them_and_ends_failed(gym, tmp_path, offline):
    tasks = tmp_path / "tasks.jsonl"
    good = {"responses_create_params": {"input": "add"}, "initial_count": 0, "expected_count": 3}
    bad = {"responses_create_params": {"input": "add"}, "initial_count": "not a number", "expected_count": 3}
    tasks.write_text("\n".join(json.dumps(r) for r in [good, bad, good]) + "\n")
    config = {
        "counter": {"plugin": "counter"},
        "policy": {"plugin": "scripted", "turns": TURNS},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
    }
    out = tmp_path / "out.jsonl"
    with running_servers(config) as served:
        result = gym(
            "collect",
            *("--input", str(tasks), "--output", str(out), "--head", served.head_url, "--progress", "plain"),
            *("--track", "mlflow", "--track-dir", str(tmp_path / "t")),
        )
    assert result.exit_code == 1  # some rollouts failed
    (run,) = mlflow_runs(tmp_path / "t/mlruns")
    assert run.info.status == "FAILED"
    metrics = run.data.metrics
    assert metrics["collect/done"] == 2 and metrics["collect/failed"] == 1
    assert metrics["collect/failures/validation_error"] == 1
    assert metrics["num_rollouts"] == 2  # the profile's denominator: scored rollouts only
    import mlflow

    client = mlflow.MlflowClient((tmp_path / "t/mlruns").resolve().as_uri())
    logged = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert logged == {"out.jsonl", "out.profile.json", "out.failures.jsonl"}


def test_an_interrupted_collection_logs_its_counts_and_ends_failed(gym, tmp_path, offline, monkeypatch):
    config = {
        "counter": {"plugin": "counter"},
        "policy": {"plugin": "scripted", "turns": TURNS, "delay_s": 0.05},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
    }
    out = tmp_path / "out.jsonl"
    with running_servers(config) as served:
        proc = gym.start(
            *("collect", "--input", str(COUNTER_TASKS), "--output", str(out), "--head", served.head_url),
            *("--repeats", "50", "--parallel", "2", "--track", "mlflow", "--track-dir", str(tmp_path / "t")),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_until(lambda: out.exists() and len(out.read_bytes().splitlines()) >= 4, "4 rollouts written")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # gym set it in its own process; this one reads
    (run,) = mlflow_runs(tmp_path / "t/mlruns")
    assert run.info.status == "FAILED"
    kept = len(out.read_text().splitlines())
    assert run.data.metrics["collect/done"] == kept < run.data.metrics["collect/total"]
    assert "mean_reward" not in run.data.metrics  # no profile of an unfinished collection
