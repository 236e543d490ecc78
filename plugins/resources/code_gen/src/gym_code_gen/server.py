"""The ``code_gen`` resources server (environments spec §9): competitive programming, the model's
Python program run against the task's unit tests in gym's sandbox (:mod:`gym_core.sandbox`).

Task rows: ``responses_create_params`` and ``verifier_metadata`` = ``{unit_tests: {inputs,
outputs, fn_name}, difficulty}`` (LiveCodeBench format; other keys ignored). The code is the text
between the last two fence lines of OUTPUT_TEXT.

One verification is one sandboxed run of the driver (:mod:`gym_code_gen.runner`, preloaded by the
sandbox pool's workers and called in a fork of one; the code as ``solution.py``, the comparisons as
``compare.py``), which runs the tests one after another,
each in a fresh fork of a zygote that never held a test or the nonce: with ``fn_name`` null the test
input is the program's standard input and its stdout is compared with the expected output; with
``fn_name`` the function is called on the test's JSON arguments and its JSON result compared. The
driver compares in a process the program cannot read, and reports verdicts tagged with a nonce the
program never saw; a test without a verdict (the program killed its driver) is a failure. The
``result`` list stops at the first failure in test order. At most ``num_processes`` verifications
run at once. Failures carry no test data nor program output unless ``debug`` is on.

With ``execution`` on Ray (:mod:`gym_code_gen.fanout`), each verification's run is one Ray task,
sandboxed on the node that runs it; its report is read here as locally.

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
from importlib.resources import files
from typing import Any

import msgspec

from gym_core import ResourcesServer, Session, ToolError
from gym_core.sandbox import Sandbox, SandboxError, SandboxLimits, SandboxPool, SandboxUnavailable
from gym_core.schemas import VerifyRequest, VerifyResponse, output_text

from gym_code_gen.config import CodeGenConfig
from gym_code_gen.verify import (
    ERROR_MESSAGES,
    GLOBAL_TIMEOUT,
    PASSED,
    RUNTIME_ERROR,
    extract_code,
    global_deadline_s,
    read_verdicts,
    reasoning_format_violation,
    truncate,
)

__all__ = ["CodeGenServer", "CodeGenVerifyRequest", "CodeGenVerifyResponse", "UnitTests", "VerifierMetadata"]

# Isolated, no bytecode written, and no site: the standard library only (the interpreter's
# site-packages and its .pth files stay out, and the start-up costs a fifth).
PYTHON_FLAGS = ("-I", "-S", "-B")
PROGRAM_PROCESSES = 32  # processes and threads one test's program may have at once
REPORT_BYTES = 1 << 20  # the driver's report, beyond 1 KiB per test (debug: 64 KiB of stderr, and outputs)


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


class CodeGenServer(ResourcesServer):
    config: CodeGenConfig
    reward_range = (-1.0, 1.0)  # reasoning_format_penalty may be negative

    async def startup(self) -> None:
        self.sandbox = Sandbox(
            self.config.sandbox_mode, max_concurrency=self.config.num_processes, bwrap=self.config.sandbox_bwrap
        )
        self.runner = files("gym_code_gen").joinpath("runner.py").read_text()
        # Long-lived sandboxed workers that preloaded the driver: a verification is a call of its main()
        # in a fork of one (no bwrap start, no interpreter start, no imports each).
        self.pool = SandboxPool(self.sandbox, size=self.config.num_processes, preload=(self.runner, "main"))
        # The same bound as the sandbox's: a run holding a slot starts at once (the deadline's clock runs).
        # On Ray it bounds the tasks in flight.
        self.slots = asyncio.Semaphore(self.config.num_processes)
        self.executor: Any = None  # a RayExecutor when programs run on Ray
        self.compare = files("gym_code_gen").joinpath("compare.py").read_text()
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
        tests = body.verifier_metadata.unit_tests
        if not tests.inputs:
            # Without tests any code would pass: the row is wrong, not the answer right.
            raise ToolError(f"{self.name}: verifier_metadata.unit_tests.inputs is empty: a task needs unit tests", 422)
        if len(tests.inputs) != len(tests.outputs):
            raise ToolError(
                f"{self.name}: verifier_metadata.unit_tests has {len(tests.inputs)} inputs but "
                f"{len(tests.outputs)} outputs",
                422,
            )
        text = output_text(body.response)
        if not text.strip():
            return CodeGenVerifyResponse(reward=0.0, difficulty=difficulty)
        code = extract_code(text) if len(text) < 100_000 else await asyncio.to_thread(extract_code, text)
        if not code:
            return CodeGenVerifyResponse(reward=0.0, extracted_model_output=text, difficulty=difficulty)
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

    async def shutdown(self) -> None:
        await self.pool.close()

    async def run_tests(self, code: str, tests: UnitTests) -> tuple[list[bool | int], dict[str, Any]]:
        """``result`` (``True`` for each passed test, up to the first failure, which ends it) and
        ``metadata`` (the failure, or ``{"execution time": s}``): one sandboxed run of the driver
        (:mod:`gym_code_gen.runner`) for all the tests."""
        count = len(tests.inputs)
        if tests.fn_name:
            problem = await asyncio.to_thread(_check_call_tests, tests)
            if problem is not None:
                return [RUNTIME_ERROR], {"error_code": RUNTIME_ERROR, "error_message": problem}
        elif self.config.reference_stdin and "class Solution" in code:
            # The reference's quirk: `Solution` ends up inside the wrapper function, and its lookup fails.
            return [RUNTIME_ERROR], {
                "error_code": RUNTIME_ERROR,
                "error_message": "class Solution in a standard-input program",
            }
        nonce = secrets.token_hex(16)
        task = json.dumps({"nonce": nonce, "inputs": tests.inputs, "expected": tests.outputs}).encode()
        isolated = self.config.sandbox_mode == "bwrap"
        args = [
            "call" if tests.fn_name else "stdin",
            tests.fn_name or "-",
            repr(self.config.unit_test_timeout_secs),
            "1" if self.config.reference_stdin else "0",
            "1" if isolated else "0",
            str(self.config.output_limit_mb << 20),
            "1" if self.config.debug else "0",
        ]
        deadline = self.deadline_s(count)
        limits = SandboxLimits(
            wall_time_s=deadline,
            cpu_time_s=deadline,
            memory_mb=self.config.memory_limit_mb,
            processes=PROGRAM_PROCESSES + 2,  # the driver and its zygote, besides the program's own
            output_bytes=REPORT_BYTES + 1024 * count,
        )
        started = time.monotonic()
        files_ = {"solution.py": code, "compare.py": self.compare}
        async with self.slots:
            if self.executor is not None:
                run = await self.executor.run_python(
                    self.runner, args=args, stdin=task, files=files_, limits=limits, python_flags=PYTHON_FLAGS
                )
            else:
                run = await self.pool.call(args, stdin=task, files=files_, limits=limits)
        if self.config.debug:
            self.log.info("driver run: %s, exit %s, %.3f s", run.outcome, run.exit_code, run.wall_time_s)
        if run.outcome == "timeout":
            return [GLOBAL_TIMEOUT] * count, {
                "error_code": GLOBAL_TIMEOUT,
                "error_message": ERROR_MESSAGES[GLOBAL_TIMEOUT],
            }
        try:
            verdicts, done = read_verdicts(run.stdout, nonce)
        except ValueError as exc:
            raise SandboxError(f"{self.name}: {exc}") from None
        result: list[bool | int] = []
        for index in range(count):
            verdict = verdicts.get(index)
            if verdict is None:
                if done or (run.outcome == "exited" and run.exit_code != 0):
                    # The driver ended by itself without this verdict: its own failure, not the program's.
                    detail = run.stderr.decode("utf-8", errors="replace").strip()[-1000:]
                    raise SandboxError(
                        f"{self.name}: the test driver failed ({run.outcome}, exit {run.exit_code}): {detail}"
                    )
                # The driver was killed or stopped (by the program: it can signal it): never a pass.
                verdict = {
                    "code": RUNTIME_ERROR,
                    "error": f"the test driver was stopped ({run.outcome}, signal {run.signal})",
                }
            outcome = verdict.pop("code")
            if outcome is PASSED:
                result.append(PASSED)
                continue
            if outcome not in ERROR_MESSAGES or outcome == GLOBAL_TIMEOUT:
                raise SandboxError(f"{self.name}: the test driver reported an unknown result {outcome!r}")
            metadata = {"error_code": outcome, "error_message": ERROR_MESSAGES[outcome]}
            if self.config.debug:
                # The hidden test itself: in rows only when debugging (a policy must never see it).
                metadata["inputs"] = truncate(tests.inputs[index])
                metadata["expected"] = truncate(tests.outputs[index])
            return [*result, outcome], {**metadata, **verdict}
        return result, {"execution time": time.monotonic() - started}

    def deadline_s(self, tests: int) -> float:
        """The global deadline of a program's ``tests`` (the wall time of the driver's run)."""
        return global_deadline_s(self.config.unit_test_timeout_secs, tests)


def _check_call_tests(tests: UnitTests) -> str | None:
    """Every argument line and expected output must be JSON: a line that is not fails the whole
    program with -4, as in the reference."""
    try:
        for text in tests.inputs:
            for line in text.split("\n"):
                json.loads(line)
        for text in tests.outputs:
            json.loads(text)
    except ValueError as exc:
        return f"a test is not valid JSON: {exc}"
    return None
