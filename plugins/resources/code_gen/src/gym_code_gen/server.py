"""The ``code_gen`` resources server (environments spec §9): competitive programming, the model's
Python program run against the task's unit tests in gym's sandbox (:mod:`gym_core.sandbox`).

Task rows: ``responses_create_params`` and ``verifier_metadata`` = ``{unit_tests: {inputs,
outputs, fn_name}, difficulty}`` (LiveCodeBench format; other keys ignored). The code is the text
between the last two fence lines of OUTPUT_TEXT.

Each unit test is one sandboxed run (:mod:`gym_code_gen.runner` as ``main.py``, the code as
``solution.py``): with ``fn_name`` null the test input is the program's standard input and its
stdout is compared with the expected output; with ``fn_name`` a driver calls the function on the
test's JSON arguments and reports the JSON result on a channel of its own. Either way the verdict
is made here, outside the sandbox, and the expected output never enters it: a program cannot
subvert the comparison. Tests run in parallel (at most ``num_processes`` programs in this server);
the ``result`` list stops at the first failure in test order, and the runs after it are cancelled.

With ``execution`` on Ray (:mod:`gym_code_gen.fanout`), each run is one Ray task, sandboxed on the
node that runs it; the verdict is still made here, from what the run returns.

A failure of the sandbox itself (or of Ray) raises :class:`~gym_core.sandbox.SandboxError` out of ``verify``:
gym answers ``502 sandbox_failed`` (the rollout fails and is retried, never scored).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any

import msgspec

from gym_core import ResourcesServer, Session, ToolError
from gym_core.sandbox import Sandbox, SandboxError, SandboxLimits, SandboxResult, SandboxUnavailable
from gym_core.schemas import VerifyRequest, VerifyResponse, output_text

from gym_code_gen.config import CodeGenConfig
from gym_code_gen.verify import (
    ERROR_MESSAGES,
    GLOBAL_TIMEOUT,
    PASSED,
    RUNTIME_ERROR,
    TIME_LIMIT,
    WRONG_ANSWER,
    call_result_matches,
    extract_code,
    global_deadline_s,
    read_call_report,
    reasoning_format_violation,
    stdout_matches,
    truncate,
)

__all__ = ["CodeGenServer", "CodeGenVerifyRequest", "CodeGenVerifyResponse", "UnitTests", "VerifierMetadata"]

# Interpreter start-up and the prelude's imports, on top of the reference's per-test time limit.
STARTUP_ALLOWANCE_S = 1.0
STDERR_KEPT = 2000
STDERR_KEPT_DEBUG = 64 * 1024


class UnitTests(msgspec.Struct, kw_only=True):
    """LiveCodeBench's unit tests: ``fn_name`` null means standard-input programs."""

    inputs: list[str]
    outputs: list[str]
    fn_name: str | None = None


class VerifierMetadata(msgspec.Struct, kw_only=True):
    unit_tests: UnitTests
    difficulty: str | None = None


class CodeGenVerifyRequest(VerifyRequest, kw_only=True):
    """The task fields ``verify`` reads; ``hash_id``, ``dataset``, ``source``... are ignored."""

    verifier_metadata: VerifierMetadata


class CodeGenVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    """Every field, nulls included: an empty answer fills in only ``reward`` and ``difficulty``."""

    extracted_model_output: str | None = None
    extracted_model_code: str | None = None
    result: list[bool | int] | None = None
    metadata: dict[str, Any] | None = None
    unit_tests_time_taken: float | None = None
    reasoning_format_violation_rate: float | None = None
    difficulty: str | None = None


@dataclass
class Outcome:
    """One test's verdict and what to report when it failed."""

    code: bool | int
    error: dict[str, Any] = field(default_factory=dict)


class _ActiveClock:
    """Time during which at least one run of a verification is running: the global deadline
    counts the program's own time, not the wait for a free slot behind other verifications."""

    def __init__(self) -> None:
        self.running = 0
        self.spent = 0.0
        self.since = 0.0

    def enter(self) -> None:
        if self.running == 0:
            self.since = time.monotonic()
        self.running += 1

    def leave(self) -> None:
        self.running -= 1
        if self.running == 0:
            self.spent += time.monotonic() - self.since

    def elapsed(self) -> float:
        return self.spent + (time.monotonic() - self.since if self.running else 0.0)


class _ReportedClock(_ActiveClock):
    """The same clock for runs on Ray, where holding a slot does not mean running (a task may wait
    for a CPU on the cluster): it counts the union of the finished runs' own wall times, as each
    node reports them, placed at their arrival. A run still in flight is bounded by its own limits."""

    def __init__(self) -> None:
        super().__init__()
        self.intervals: list[tuple[float, float]] = []

    def enter(self) -> None:
        pass

    def leave(self) -> None:
        pass

    def record(self, run_s: float) -> None:
        end = time.monotonic()
        self.intervals.append((end - run_s, end))

    def elapsed(self) -> float:
        total, reach = 0.0, float("-inf")
        for start, end in sorted(self.intervals):
            if end > reach:
                total += end - max(start, reach)
                reach = end
        return total


class CodeGenServer(ResourcesServer):
    config: CodeGenConfig
    reward_range = (-1.0, 1.0)  # reasoning_format_penalty may be negative

    async def startup(self) -> None:
        self.sandbox = Sandbox(
            self.config.sandbox_mode, max_concurrency=self.config.num_processes, bwrap=self.config.sandbox_bwrap
        )
        # The same bound as the sandbox's: a run holding a slot starts at once (the deadline's clock runs).
        # On Ray it bounds the tasks in flight.
        self.slots = asyncio.Semaphore(self.config.num_processes)
        self.executor: Any = None  # a RayExecutor when programs run on Ray
        self.runner = files("gym_code_gen").joinpath("runner.py").read_text()
        if self.config.sandbox_mode == "unsandboxed":
            self.log.warning("sandbox_mode is unsandboxed: the model's programs run WITHOUT isolation")
        if self._ray_wanted():
            await self._start_ray()
            return
        await self.sandbox.start()  # SandboxUnavailable: this host cannot sandbox, and start-up fails saying why

    def _ray_wanted(self) -> bool:
        """``execution``: ray, or auto with Ray on (RAY_ADDRESS, ray_head_node_address, or Ray already
        joined in this process) and installed. Decided without importing Ray when it is off."""
        if self.config.execution != "auto":
            return self.config.execution == "ray"
        address = self.global_config.ray_head_node_address if self.global_config is not None else None
        joined = "ray" in sys.modules and sys.modules["ray"].is_initialized()
        if not (os.environ.get("RAY_ADDRESS") or address or joined):
            return False
        if importlib.util.find_spec("ray") is None:
            self.log.warning(
                "Ray is on but not installed in this server's venv (install gym-code-gen[ray]): "
                "programs run in this server's sandbox"
            )
            return False
        return True

    async def _start_ray(self) -> None:
        from gym_code_gen.fanout import RayExecutor, join_ray

        address = self.global_config.ray_head_node_address if self.global_config is not None else None
        try:
            ray = await asyncio.to_thread(join_ray, address)
        except ImportError:
            raise SandboxUnavailable(
                f"{self.name}: execution is ray but Ray is not installed in this server's venv "
                "(install gym-code-gen[ray], the cluster's Ray version)"
            ) from None
        except Exception as exc:
            raise SandboxUnavailable(
                f"{self.name}: could not join the Ray cluster to run programs on: {type(exc).__name__}: {exc}"
            ) from None
        self.executor = RayExecutor(
            ray,
            mode=self.config.sandbox_mode,
            bwrap=self.config.sandbox_bwrap,
            num_cpus=self.config.ray_num_cpus,
            allowance_s=self.config.ray_task_allowance_s,
        )
        try:
            await self.executor.probe(self.config.ray_task_allowance_s)
        except SandboxError as exc:
            raise SandboxUnavailable(f"{self.name}: programs cannot run on the Ray cluster: {exc}") from None
        self.log.info(
            "programs run as Ray tasks (%g CPU each, at most %d at once), sandboxed on their nodes",
            self.config.ray_num_cpus,
            self.config.num_processes,
        )

    async def verify(self, session: Session, body: CodeGenVerifyRequest) -> CodeGenVerifyResponse:
        difficulty = body.verifier_metadata.difficulty
        text = output_text(body.response)
        if not text.strip():
            return CodeGenVerifyResponse(reward=0.0, difficulty=difficulty)
        code = extract_code(text) if len(text) < 100_000 else await asyncio.to_thread(extract_code, text)
        if not code:
            return CodeGenVerifyResponse(reward=0.0, extracted_model_output=text, difficulty=difficulty)
        tests = body.verifier_metadata.unit_tests
        if len(tests.inputs) != len(tests.outputs):
            raise ToolError(
                f"{self.name}: verifier_metadata.unit_tests has {len(tests.inputs)} inputs but "
                f"{len(tests.outputs)} outputs",
                422,
            )
        started = time.monotonic()
        result, metadata = await self.run_tests(code, tests)
        elapsed = time.monotonic() - started
        violation = reasoning_format_violation(body.response)
        if violation:
            reward = self.config.reasoning_format_penalty
        else:
            reward = 1.0 if all(entry is True for entry in result) else 0.0
        return CodeGenVerifyResponse(
            reward=reward,
            extracted_model_output=text,
            extracted_model_code=code,
            result=result,
            metadata=metadata,
            unit_tests_time_taken=elapsed,
            reasoning_format_violation_rate=float(violation),
            difficulty=difficulty,
        )

    # --- running the tests -------------------------------------------------------------------------

    async def run_tests(self, code: str, tests: UnitTests) -> tuple[list[bool | int], dict[str, Any]]:
        """``result`` (``True`` for each passed test, up to the first failure, which ends it) and
        ``metadata`` (the failure, or ``{"execution time": s}``)."""
        count = len(tests.inputs)
        if count == 0:
            return [], {"execution time": 0.0}
        if tests.fn_name:
            expected, problem = await asyncio.to_thread(_parse_call_tests, tests)
            if problem is not None:
                return [RUNTIME_ERROR], {"error_code": RUNTIME_ERROR, "error_message": problem}
        else:
            expected = tests.outputs
            if self.config.reference_stdin and "class Solution" in code:
                # The reference's quirk: `Solution` ends up inside the wrapper function, and its lookup fails.
                return [RUNTIME_ERROR], {
                    "error_code": RUNTIME_ERROR,
                    "error_message": "class Solution in a standard-input program",
                }
        started = time.monotonic()
        clock = _ReportedClock() if self.executor is not None else _ActiveClock()
        deadline = self.deadline_s(count)
        tasks = [
            asyncio.ensure_future(self._run_test(code, tests.fn_name, tests.inputs[i], expected[i], clock))
            for i in range(count)
        ]
        outcomes: dict[int, Outcome] = {}
        first_failure = count
        try:
            while True:
                waiting = {tasks[i] for i in range(first_failure) if i not in outcomes}
                if not waiting:
                    break
                remaining = deadline - clock.elapsed()
                if remaining <= 0:
                    return [GLOBAL_TIMEOUT] * count, {
                        "error_code": GLOBAL_TIMEOUT,
                        "error_message": ERROR_MESSAGES[GLOBAL_TIMEOUT],
                    }
                await asyncio.wait(waiting, timeout=max(remaining, 0.05), return_when=asyncio.FIRST_COMPLETED)
                for index in range(first_failure):
                    if index not in outcomes and tasks[index].done():
                        outcomes[index] = tasks[index].result()  # a SandboxError propagates
                        if outcomes[index].code is not PASSED and index < first_failure:
                            first_failure = index
                            for later in tasks[index + 1 :]:
                                later.cancel()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if first_failure == count:
            return [PASSED] * count, {"execution time": time.monotonic() - started}
        failure = outcomes[first_failure]
        metadata = {
            "error_code": failure.code,
            "error_message": ERROR_MESSAGES[failure.code],
            "inputs": truncate(tests.inputs[first_failure]),
            "expected": truncate(tests.outputs[first_failure]),
            **failure.error,
        }
        return [PASSED] * first_failure + [failure.code], metadata

    def deadline_s(self, tests: int) -> float:
        """The global deadline of a program's ``tests`` runs, counted while at least one runs."""
        return global_deadline_s(self.config.unit_test_timeout_secs, tests)

    def _limits(self, call: bool) -> SandboxLimits:
        timeout = self.config.unit_test_timeout_secs
        # A call is timed twice in the reference (loading the module, then the call), each up to the limit.
        wall = (2 * timeout if call else timeout) + STARTUP_ALLOWANCE_S
        return SandboxLimits(
            wall_time_s=wall,
            cpu_time_s=wall,
            memory_mb=self.config.memory_limit_mb,
            output_bytes=self.config.output_limit_mb << 20,
        )

    async def _run_test(
        self, code: str, fn_name: str | None, test_input: str, expected: Any, clock: _ActiveClock
    ) -> Outcome:
        files_ = {"solution.py": code}
        if fn_name:
            nonce = secrets.token_hex(16)
            args = ["call", fn_name, str(self.config.unit_test_timeout_secs)]
            stdin = f"{nonce}\n{test_input}".encode()
        else:
            args = ["stdin", "1" if self.config.reference_stdin else "0"]
            stdin = test_input.encode()
        async with self.slots:
            clock.enter()
            try:
                run = await (self.executor or self.sandbox).run_python(
                    self.runner,
                    args=args,
                    stdin=stdin,
                    files=files_,
                    limits=self._limits(bool(fn_name)),
                )
            finally:
                clock.leave()
        if isinstance(clock, _ReportedClock):
            clock.record(run.wall_time_s)
        if fn_name:
            outcome = await asyncio.to_thread(_judge_call, run, nonce, expected)
        else:
            outcome = await asyncio.to_thread(_judge_stdin, run, expected)
        kept = STDERR_KEPT_DEBUG if self.config.debug else STDERR_KEPT
        if outcome.code is not PASSED:
            stderr = run.stderr.decode("utf-8", errors="replace")
            if stderr.strip():
                outcome.error.setdefault("traceback", stderr[-kept:])
        if self.config.debug:
            self.log.info("test run: %s, outcome %s, %.3f s", outcome.code, run.outcome, run.wall_time_s)
        return outcome


def _parse_call_tests(tests: UnitTests) -> tuple[list[Any], str | None]:
    """The expected outputs as JSON, after checking that every argument line is JSON: a line that
    is not fails the whole program with -4, as in the reference."""
    try:
        for text in tests.inputs:
            for line in text.split("\n"):
                json.loads(line)
        return [json.loads(text) for text in tests.outputs], None
    except ValueError as exc:
        return [], f"a test is not valid JSON: {exc}"


def _stopped(run: SandboxResult) -> bool:
    return run.outcome in ("timeout", "cpu_limit", "output_limit")


def _judge_stdin(run: SandboxResult, expected: str) -> Outcome:
    if _stopped(run):
        return Outcome(TIME_LIMIT, {"stopped_by": run.outcome})
    if not run.ok:
        return Outcome(RUNTIME_ERROR, {"exit_code": run.exit_code, "signal": run.signal})
    output = run.stdout.decode("utf-8", errors="replace")
    if stdout_matches(output, expected):
        return Outcome(PASSED)
    return Outcome(WRONG_ANSWER, {"output": truncate(output)})


def _judge_call(run: SandboxResult, nonce: str, expected: Any) -> Outcome:
    report = read_call_report(run.stdout, nonce)
    if _stopped(run):
        # Stopped while loading the module: the reference's module-level timeout, an error (-4).
        return Outcome(TIME_LIMIT if report.loaded else RUNTIME_ERROR, {"stopped_by": run.outcome})
    if run.outcome != "exited" or report.kind is None:
        return Outcome(
            RUNTIME_ERROR,
            {"exit_code": run.exit_code, "signal": run.signal, "error": "the program ended without a result"},
        )
    if report.frames > 1:
        return Outcome(WRONG_ANSWER, {"error": "more than one result reported (malformed)"})
    if report.kind == "timeout":
        return Outcome(TIME_LIMIT)
    if report.kind == "error":
        return Outcome(RUNTIME_ERROR, {"error": report.payload})
    if report.kind == "unserializable":
        return Outcome(WRONG_ANSWER, {"output": f"a {report.payload} (not JSON)"})
    try:
        prediction = json.loads(report.payload)
    except ValueError:
        return Outcome(WRONG_ANSWER, {"error": "the result is not JSON (malformed)"})
    if call_result_matches(prediction, expected):
        return Outcome(PASSED)
    return Outcome(WRONG_ANSWER, {"output": truncate(report.payload)})
