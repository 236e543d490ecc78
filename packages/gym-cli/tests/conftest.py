"""Fixtures shared by gym-cli's tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gym_core.client import ServerClient
from gym_core.config import free_port

from gym_cli.main import cli

ROOT = Path(__file__).resolve().parents[3]


class GymProcess(subprocess.Popen[str]):
    """A real ``python -m gym_cli`` process (see :meth:`Gym.start`)."""

    def read_until(self, text: str, timeout_s: float) -> list[str]:
        """The lines printed until one holds ``text``; the test fails if the process exits first or
        ``timeout_s`` passes."""
        lines: list[str] = []
        deadline = time.monotonic() + timeout_s
        assert self.stdout is not None
        while time.monotonic() < deadline:
            line = self.stdout.readline()
            if not line:
                pytest.fail("gym exited early:\n" + "".join(lines))
            lines.append(line)
            if text in line:
                return lines
        pytest.fail(f"{text!r} not seen within {timeout_s} s:\n" + "".join(lines))

    def read_on(self, into: list[str] | None = None) -> None:
        """Keep reading the output in a thread (appending to ``into``), so that the process and its
        servers never block on a full pipe."""
        assert self.stdout is not None
        stdout = self.stdout
        threading.Thread(target=(stdout.read if into is None else lambda: into.extend(stdout)), daemon=True).start()

    def stop(self, timeout_s: float = 30) -> None:
        """Ctrl+C, as a user stops it; its session killed when it has not ended within ``timeout_s``."""
        if self.poll() is None:
            self.send_signal(signal.SIGINT)
            try:
                self.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.wait()


class Gym:
    """The ``gym`` command, as the tests run it: in this process (``gym(...)``, click's test runner),
    as a real process to talk to while it runs (:meth:`start`), or as one run to its end (:meth:`run`).
    ``env`` is added to the environment (for a real process, None removes a variable, and the output
    is 200 columns wide)."""

    def __call__(self, *args: str, env: Mapping[str, str] | None = None) -> Result:
        """``gym ARGS`` in this process; a bug's exception propagates (gym's own errors become exit codes)."""
        return CliRunner().invoke(cli(), list(args), env=env, catch_exceptions=False)

    def start(self, *args: str, env: Mapping[str, str | None] | None = None, **popen: Any) -> GymProcess:
        """``python -m gym_cli ARGS`` started from the repository root in a session of its own, stdout
        and stderr together in ``proc.stdout`` (``popen`` overrides, ``stdout=subprocess.DEVNULL`` say)."""
        options: dict[str, Any] = {
            "stdout": subprocess.PIPE,
            "stderr": subprocess.STDOUT,
            "text": True,
            "cwd": ROOT,
            "start_new_session": True,
            **popen,
        }
        return GymProcess([sys.executable, "-m", "gym_cli", *args], env=_environ(env), **options)

    def run(
        self, *args: str, env: Mapping[str, str | None] | None = None, timeout_s: float = 120
    ) -> subprocess.CompletedProcess:
        """``python -m gym_cli ARGS`` run to its end: its exit status, stdout and stderr."""
        return subprocess.run(
            [sys.executable, "-m", "gym_cli", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=_environ(env),
            timeout=timeout_s,
        )


def _environ(env: Mapping[str, str | None] | None) -> dict[str, str]:
    """The test process's environment, 200 columns wide, with ``env`` on top (None: a variable removed)."""
    merged: dict[str, str | None] = {**os.environ, "COLUMNS": "200", **(env or {})}
    return {key: value for key, value in merged.items() if value is not None}


@pytest.fixture(scope="session")
def gym() -> Gym:
    """:class:`Gym`: ``gym("collect", ...)`` in this process, ``gym.start("run", ...)`` and
    ``gym.run("stop")`` as real processes."""
    return Gym()


@pytest.fixture
def gym_run(gym: Gym) -> Iterator[Callable[..., str]]:
    """Start ``gym run CONFIG --isolation none`` as a user would (a real process); the head's URL once
    all servers are ready. Stopped with Ctrl+C at the end of the test."""
    procs: list[GymProcess] = []

    def start(config: Path, *overrides: str) -> str:
        port = free_port()
        proc = gym.start("run", str(config), "--isolation", "none", f"head_server.port={port}", *overrides)
        procs.append(proc)
        proc.read_until("All servers ready", 120)
        proc.read_on()
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in procs:
        proc.stop()


# --- rollouts for gym report (test_report.py, test_report_browser.py) ------------------------------

# A model answer that would run script if the report ever put rollout text in the page as HTML.
HOSTILE_ANSWER = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2"> done'


def _counter_task(initial: int, expected: int | None, turns: list[dict]) -> dict:
    """A counter task whose scripted model answers with ``turns`` (``expected`` None: verify refuses it)."""
    import json

    task = {
        "responses_create_params": {
            "input": [{"role": "user", "content": f"Make the counter {expected}."}],
            "metadata": {"scripted_turns": json.dumps(turns)},
        },
        "initial_count": initial,
    }
    return task if expected is None else {**task, "expected_count": expected}


def _add(count: int) -> list[dict]:
    return [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": count}}]}, {"text": f"added {count}"}]


# Two runs of the same five tasks, 3 rollouts each. "before": tasks 0 and 2 pass, 1 answers with
# HOSTILE_ANSWER (fails), 3 is refused by verify (every rollout in the failures file), 4 adds too
# little (fails). "after": 1 and 3 are fixed; 4 still fails.
REPORT_RUNS = {
    "before": [
        _counter_task(0, 3, _add(3)),
        _counter_task(0, 2, [{"text": HOSTILE_ANSWER}]),
        _counter_task(5, 5, [{"text": "nothing to add"}]),
        _counter_task(0, None, _add(1)),
        _counter_task(1, 4, _add(2)),
    ],
    "after": [
        _counter_task(0, 3, _add(3)),
        _counter_task(0, 2, _add(2)),
        _counter_task(5, 5, [{"text": "nothing to add"}]),
        _counter_task(0, 1, _add(1)),
        _counter_task(1, 4, _add(2)),
    ],
}


@pytest.fixture(scope="session")
def hostile_answer() -> str:
    """The answer of task 1 of the "before" run in ``report_runs``."""
    return HOSTILE_ANSWER


@pytest.fixture(scope="session")
def report_runs(tmp_path_factory, gym: Gym) -> dict[str, Path]:
    """``REPORT_RUNS`` collected for real (counter, simple_agent, scripted model, in-thread servers):
    run name → rollouts file, with its ``.failures.jsonl`` beside it."""
    import json

    from gym_core.testing import running_servers

    folder = tmp_path_factory.mktemp("report_runs")
    config = {
        "counter": {"plugin": "counter"},
        "policy": {"plugin": "scripted", "model_name": "scripted-policy"},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
    }
    outputs = {}
    with running_servers(config) as running:
        for name, tasks in REPORT_RUNS.items():
            tasks_file, output = folder / f"{name}.tasks.jsonl", folder / f"{name}.jsonl"
            tasks_file.write_text("".join(json.dumps(t) + "\n" for t in tasks))
            result = gym(
                "collect",
                "--input",
                str(tasks_file),
                "--output",
                str(output),
                "--repeats",
                "3",
                "--head",
                running.head_url,
                "--no-profile",
                "--retries",
                "0",
            )
            assert result.exit_code == (1 if name == "before" else 0), result.output
            outputs[name] = output
    return outputs


class CounterCollection:
    """``gym collect`` of the counter's example tasks against a running head (as a user runs it), and
    the checks the replica tests share: every (task, rollout) scored once, on its own seeded state."""

    TASKS = ROOT / "plugins/resources/counter/data/example.jsonl"

    def __init__(self, repeats: int, parallel: int):
        self.repeats, self.parallel = repeats, parallel
        self.n_tasks = len(self.TASKS.read_text().splitlines())

    def start(self, head: str, out: Path, *extra: str) -> subprocess.Popen:
        return Gym().start(
            "collect",
            "--input",
            str(self.TASKS),
            "--output",
            str(out),
            "--agent",
            "agent",
            "--head",
            head,
            "--repeats",
            str(self.repeats),
            "--parallel",
            str(self.parallel),
            "--no-profile",
            *extra,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=False,
        )

    @staticmethod
    def rows(path: Path) -> list[dict]:
        import json

        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    def assert_scored_once(self, out: Path) -> None:
        collected = self.rows(out)
        keys = [(r["task_index"], r["rollout_index"]) for r in collected]
        assert len(keys) == len(set(keys)) == self.n_tasks * self.repeats
        for row in collected:  # each row scored on its own seeded state: +3 from the scripted tool call
            assert row["final_count"] == row["initial_count"] + 3
            assert row["reward"] == float(row["expected_count"] == row["initial_count"] + 3)


@pytest.fixture
def counter_collection() -> type[CounterCollection]:
    """:class:`CounterCollection`, for a module's own ``collection`` fixture (its repeats and parallel)."""
    return CounterCollection


class GymRun:
    """A `gym run` process: its head URL and every line it printed."""

    def __init__(self, proc: subprocess.Popen, head: str, lines: list[str]):
        self.proc, self.head, self.lines = proc, head, lines

    def instances(self) -> list[dict]:
        """The head server's ``/server_instances``."""

        async def ask() -> list[dict]:
            client = await ServerClient.from_head(self.head)
            async with client:
                return await client.get(self.head, "/server_instances")

        return asyncio.run(ask())

    def row(self, name: str) -> dict:
        """The ``/server_instances`` row of instance ``name``."""
        [row] = [row for row in self.instances() if row["name"] == name]
        return row


@contextlib.contextmanager
def _gym_run_process(config: Path, ready_timeout_s: float, stop_timeout_s: float) -> Iterator[GymRun]:
    """``gym run CONFIG --isolation none`` in a session of its own, kept for a whole module, once all
    servers are ready (its output read on, so the servers never block on a full pipe); stopped with
    Ctrl+C, then killed, at the end."""
    port = free_port()
    proc = Gym().start("run", str(config), "--isolation", "none", f"head_server.port={port}")
    try:
        lines = proc.read_until("All servers ready", ready_timeout_s)
        proc.read_on(lines)
        yield GymRun(proc, f"http://127.0.0.1:{port}", lines)
    finally:
        proc.stop(stop_timeout_s)


@pytest.fixture(scope="session")
def gym_run_process():
    """:func:`_gym_run_process`, for module-scoped fixtures that keep one `gym run` for their tests."""
    return _gym_run_process
