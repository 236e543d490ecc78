"""The ``repo`` environment: a repository, a terminal, hidden tests.

``seed_session`` loads the row's ``repository`` into the session's workspace (:mod:`gym_repo.workspace`:
held in memory, size-capped, dropped when the session closes or expires). The tools act on it:
``run`` executes a shell command in gym's sandbox (:mod:`gym_core.sandbox`) over a copy of the
workspace and keeps the files the command leaves; ``read_file``, ``write_file``, ``list_files`` and
``apply_patch`` (a unified diff, applied by ``patch`` in the sandbox) do the rest. Every path stays
inside the workspace; a refused path, a failed patch or a spent session is a tool error (4xx) the
model sees.

``verify`` runs the row's ``hidden_tests`` (files placed over the final workspace, in a fresh
sandbox, never shown to the model) with the unittest driver :mod:`gym_repo.runner` or, for a row with
``test_runner: "pytest"``, the pytest driver :mod:`gym_repo.pytest_runner`, one result per test id of
``tests_to_fix`` and ``tests_to_keep``. A failure of the sandbox itself is a
``502 sandbox_failed``, never a reward.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import py_compile
import secrets
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from gym_core import ResourcesServer, Session, ToolError, tool
from gym_core.sandbox import Sandbox, SandboxLimits, SandboxPool
from gym_core.schemas import SeedSessionRequest, VerifyRequest, VerifyResponse

from gym_repo.config import RepoConfig
from gym_repo.workspace import (
    META,
    WORK,
    Snapshot,
    Workspace,
    WorkspaceError,
    load_repository,
    prelude,
    read_snapshot,
    sandbox_files,
    snapshot_script,
)

Repository = str | dict[str, str]
LIST_LIMIT = 1000  # names list_files returns at most; `more` says how many it left out


class RepoSeed(SeedSessionRequest, kw_only=True):
    repository: Repository


class RepoVerifyRequest(VerifyRequest, kw_only=True):
    hidden_tests: Repository
    tests_to_fix: list[str]
    tests_to_keep: list[str] = []
    test_runner: Literal["unittest", "pytest"] = "unittest"


class TestResult(msgspec.Struct, kw_only=True):
    test: str
    passed: bool
    detail: str = ""


class RepoVerifyResponse(VerifyResponse, kw_only=True):
    tests_passed: int
    tests_total: int
    fixed: bool  # every test of tests_to_fix passes
    kept: bool  # every test of tests_to_keep passes
    test_results: list[TestResult]


def truncate(data: bytes, limit: int) -> str:
    """``data`` as text, cut at ``limit`` bytes with a marker."""
    if len(data) <= limit:
        return data.decode(errors="replace")
    cut = data[:limit].decode(errors="replace")
    return f"{cut}\n[... output truncated: {len(data) - limit} more bytes ...]"


class RepoServer(ResourcesServer):
    config: RepoConfig

    async def startup(self) -> None:
        await super().startup()
        self.sandbox = Sandbox("bwrap", max_concurrency=self.config.max_concurrency, bwrap=self.config.sandbox_bwrap)
        await self.sandbox.start()  # SandboxUnavailable: start-up fails saying why
        # Commands run in long-lived sandboxed workers (a fork per command, everything cleaned after it),
        # or each in a sandbox of its own. The pool's limits size every worker's writable space.
        self.runner = resources.files("gym_repo").joinpath("runner.py").read_bytes()
        self.max_bytes = self.config.workspace_mb << 20
        self.pool: SandboxPool | None = None
        if self.config.sandbox_pool:
            limits = self._limits(self.config.command_timeout_s)
            self.pool = SandboxPool(self.sandbox, size=self.config.max_concurrency, limits=limits)

    async def shutdown(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        await super().shutdown()

    def _base(self) -> Path | None:
        return Path(self.config.repository_root) if self.config.repository_root else None

    # --- the session -----------------------------------------------------------------------------

    async def seed_session(self, session: Session, body: RepoSeed) -> dict:
        try:
            workspace = load_repository(body.repository, max_bytes=self.max_bytes, base=self._base())
        except WorkspaceError as exc:
            raise ToolError(f"{self.name}: repository: {exc}", 422) from None
        self.sessions.set(
            session.id, {"workspace": workspace, "lock": asyncio.Lock(), "command_time_s": 0.0, "commands": 0}
        )
        return {"files": len(workspace.entries)}

    def _state(self, session: Session) -> dict:
        return self.existing_session_state(session)

    def _limits(self, timeout_s: float) -> SandboxLimits:
        scratch_mb = self.config.workspace_mb * 2 + 8  # the workspace, gym's files, and /dev/shm for the output
        return SandboxLimits(
            wall_time_s=timeout_s + 15,  # the command's own timeout inside, then the tar of the workspace
            cpu_time_s=timeout_s + 5,
            memory_mb=self.config.memory_mb,
            processes=self.config.processes,
            open_files=256,
            output_bytes=(scratch_mb << 20) * 2,  # the tar stream: the scratch's files, tar's headers
            scratch_mb=scratch_mb,
        )

    async def _command(self, state: dict, command: str, *, stdin: bytes | None = None) -> tuple[Snapshot, str]:
        """Run ``command`` over the session's workspace: the run's snapshot (the new workspace, stdout,
        stderr, the exit code) and how the run ended (``exited``, ``timeout``). The session's
        workspace is left as it was."""
        spent = state["command_time_s"]
        budget = self.config.session_command_time_s
        if spent >= budget:
            raise ToolError(f"this session has spent its command time ({budget:g} s); submit your work", 400)
        timeout_s = min(self.config.command_timeout_s, budget - spent)
        workspace: Workspace = state["workspace"]
        extra = {
            "prelude.sh": prelude(workspace, self.sandbox.interpreter).encode(),
            "command": command.encode(),
            "main.sh": snapshot_script(timeout_s, stdin_file=f"{META}/stdin" if stdin is not None else None).encode(),
        }
        if stdin is not None:
            extra["stdin"] = stdin
        started = time.monotonic()
        try:
            runner = self.pool or self.sandbox
            result = await runner.run(
                ["/bin/sh", f"{META}/main.sh"], files=sandbox_files(workspace, extra), limits=self._limits(timeout_s)
            )
        finally:
            state["command_time_s"] += time.monotonic() - started
            state["commands"] += 1
        stopped = ToolError(
            f"the command was stopped ({result.outcome}): it went past a limit of its sandbox (time, memory, "
            f"processes or disk); the workspace is unchanged. {result.stderr.decode(errors='replace')[-300:]}".strip(),
            400,
        )
        if result.outcome != "exited":
            raise stopped
        # tar's own exit status is not the verdict: it fails on a file the command left unreadable (which is
        # then left out of the workspace) but still writes the rest; the command's status is in the stream.
        try:
            snap = read_snapshot(result.stdout, max_bytes=self.max_bytes)
        except WorkspaceError as exc:
            raise ToolError(f"{exc}; the workspace is unchanged", 400) from None
        if snap.exit_code is None:
            raise stopped
        return snap, "timeout" if snap.exit_code in (124, 137) else "exited"

    # --- tools -------------------------------------------------------------------------------------

    @tool
    async def run_command(
        self,
        session: Session,
        command: Annotated[str, msgspec.Meta(description="A shell command (sh), run in the repository's root")],
    ) -> dict:
        """Run a shell command in the repository (no network; limited time, memory and disk). Returns its exit code,
        stdout and stderr; files it changes stay changed."""
        state = self._state(session)
        async with state["lock"]:
            snap, outcome = await self._command(state, command)
            state["workspace"] = snap.workspace
        limit = self.config.output_bytes
        answer: dict[str, Any] = {
            "exit_code": snap.exit_code,
            "stdout": truncate(snap.stdout, limit),
            "stderr": truncate(snap.stderr, limit),
        }
        if outcome == "timeout":
            answer["timed_out"] = True
        return answer

    @tool
    async def read_file(
        self,
        session: Session,
        path: Annotated[str, msgspec.Meta(description="Path relative to the repository's root")],
    ) -> dict:
        """Read a file of the repository."""
        state = self._state(session)
        try:
            data = state["workspace"].read(path)
        except WorkspaceError as exc:
            raise ToolError(str(exc), 400) from None
        return {"path": path, "content": truncate(data, self.config.output_bytes * 4)}

    @tool
    async def write_file(
        self,
        session: Session,
        path: Annotated[str, msgspec.Meta(description="Path relative to the repository's root")],
        content: Annotated[str, msgspec.Meta(description="The file's whole new content")],
    ) -> dict:
        """Create or overwrite a file of the repository (parent directories are created)."""
        state = self._state(session)
        async with state["lock"]:
            try:
                state["workspace"].write(path, content.encode())
            except WorkspaceError as exc:
                raise ToolError(str(exc), 400) from None
        return {"path": path, "bytes": len(content.encode())}

    @tool
    async def list_files(
        self,
        session: Session,
        path: Annotated[str, msgspec.Meta(description="Directory relative to the repository's root")] = ".",
        recursive: Annotated[bool, msgspec.Meta(description="List the whole tree (else one level)")] = True,
    ) -> dict:
        """List the files of a directory of the repository (directories end with '/')."""
        state = self._state(session)
        try:
            files = state["workspace"].list(path, recursive=recursive)
        except WorkspaceError as exc:
            raise ToolError(str(exc), 400) from None
        if len(files) > LIST_LIMIT:
            return {"path": path, "files": files[:LIST_LIMIT], "more": len(files) - LIST_LIMIT}
        return {"path": path, "files": files}

    @tool
    async def apply_patch(
        self,
        session: Session,
        patch: Annotated[str, msgspec.Meta(description="A unified diff (as `diff -u` or `git diff` writes it)")],
    ) -> dict:
        """Apply a unified diff to the repository; all of it applies or nothing does."""
        state = self._state(session)
        strip = 1 if any(line.startswith(("--- a/", "+++ b/")) for line in patch.splitlines()) else 0
        # `patch` reads the diff on its stdin; --forward: a patch already applied is refused, not reversed.
        command = f"patch -p{strip} --batch --forward --no-backup-if-mismatch -r -"
        async with state["lock"]:
            snap, _ = await self._command(state, command, stdin=patch.encode())
            if snap.exit_code != 0:
                detail = truncate(snap.stdout + snap.stderr, self.config.output_bytes).strip()
                raise ToolError(f"the patch does not apply (nothing was changed): {detail}", 400)
            state["workspace"] = snap.workspace
        return {"applied": True, "output": truncate(snap.stdout, self.config.output_bytes).strip()}

    # --- the verdict -------------------------------------------------------------------------------

    async def verify(self, session: Session, body: RepoVerifyRequest) -> RepoVerifyResponse:
        state = self._state(session)
        try:
            tests = load_repository(body.hidden_tests, max_bytes=self.max_bytes, base=self._base())
        except WorkspaceError as exc:
            raise ToolError(f"{self.name}: hidden_tests: {exc}", 422) from None
        test_ids = [*body.tests_to_fix, *body.tests_to_keep]
        if not test_ids:
            raise ToolError(f"{self.name}: the row names no test (tests_to_fix and tests_to_keep are empty)", 422)
        bad = [t for t in test_ids if not t.strip() or t.startswith("-")]
        if bad:
            raise ToolError(f"{self.name}: tests_to_fix/tests_to_keep: {bad[0]!r} is not a test id", 422)
        async with state["lock"]:
            final = state["workspace"].copy()
        for path, entry in tests.entries.items():  # the hidden tests win over whatever the model left there
            final.entries.pop(path, None)
            final.entries[path] = entry
        hidden = [path for path, entry in tests.entries.items() if entry.kind == "file"]
        results = await self.run_tests(final, test_ids, test_runner=body.test_runner, hidden=hidden)
        fix = [results[t] for t in body.tests_to_fix]
        keep = [results[t] for t in body.tests_to_keep]
        passed = sum(r.passed for r in results.values())
        if self.config.reward == "fraction":
            reward = passed / len(results)
        else:
            reward = float(passed == len(results))
        return RepoVerifyResponse(
            reward=reward,
            tests_passed=passed,
            tests_total=len(results),
            fixed=all(r.passed for r in fix),
            kept=all(r.passed for r in keep),
            test_results=[results[t] for t in dict.fromkeys(test_ids)],
        )

    async def run_tests(
        self, workspace: Workspace, test_ids: list[str], *, test_runner: str = "unittest", hidden: list[str] = ()
    ) -> dict[str, TestResult]:
        """Run ``test_ids`` over ``workspace`` as a job of the sandbox pool (a fresh process in a worker
        that empties its scratch and kills what the job left, as for a command), or in a sandbox of its
        own without ``sandbox_pool``; a result per id (a test the run did not reach, past the time
        limit, fails)."""
        return await run_hidden_tests(
            self.pool or self.sandbox,
            workspace,
            test_ids,
            self.runner,
            self._limits(self.config.verify_timeout_s),
            test_timeout_s=self.config.test_timeout_s,
            test_runner=test_runner,
            hidden=hidden,
        )


SHARED = "_driver.py"  # what both drivers run (from its source) before their own code; shipped beside them
PYTEST_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging")
# Modules of other installed packages pytest imports (``py``, pygments for colours the driver never
# shows), found by importing pytest in a child interpreter: only those are shipped.
_IMPORTED = """
import importlib, json, os, pkgutil, site, sys, sysconfig
import pytest, _pytest
for info in pkgutil.walk_packages(_pytest.__path__, "_pytest."):
    try:
        importlib.import_module(info.name)
    except Exception:
        pass
roots = sorted({os.path.realpath(p) for p in site.getsitepackages() + [sysconfig.get_path("purelib")]}, key=len)
found = {}
for name, module in list(sys.modules.items()):
    path = os.path.realpath(getattr(module, "__file__", None) or "")
    for root in roots:
        if path.endswith(".py") and path.startswith(root + os.sep):
            found[path] = os.path.relpath(path, root)
print(json.dumps(sorted(found.items())))
"""


@functools.cache
def pytest_driver() -> dict[str, bytes]:
    """The pytest driver (``pytest_runner.py``, and ``_driver.py``, the part it shares with the
    unittest driver) and, under ``lib/``, the installed pytest and the packages it imports (pure
    Python, this server's own copies; of pygments only the modules pytest imports), each module with
    its bytecode compiled here (unchecked-hash ``.pyc``: the sandbox's interpreter, the same as this
    one, loads it without compiling the source). Made once per process."""
    files = {name: resources.files("gym_repo").joinpath(name).read_bytes() for name in ("pytest_runner.py", SHARED)}
    sources: list[tuple[Path, str]] = []
    for package in PYTEST_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"the pytest runner needs the package {package!r}, which is not installed")
        top = Path(next(iter(spec.submodule_search_locations)))
        sources += [(path, path.relative_to(top.parent).as_posix()) for path in sorted(top.rglob("*.py"))]
    found = subprocess.run([sys.executable, "-I", "-c", _IMPORTED], capture_output=True, check=True, timeout=120)
    shipped = {relative for _, relative in sources}
    for path, relative in json.loads(found.stdout):
        if relative.split("/")[0] not in PYTEST_PACKAGES and relative not in shipped:
            sources.append((Path(path), relative))
    with tempfile.TemporaryDirectory() as scratch:
        for source, relative in sources:
            files[f"lib/{relative}"] = source.read_bytes()
            cached = importlib.util.cache_from_source(relative)
            target = os.path.join(scratch, cached)
            py_compile.compile(
                str(source),
                cfile=target,
                dfile=f"{META}/lib/{relative}",
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
            files[f"lib/{cached}"] = Path(target).read_bytes()
    return files


async def run_hidden_tests(
    sandbox: Sandbox | SandboxPool,
    workspace: Workspace,
    test_ids: list[str],
    runner: bytes,
    limits: SandboxLimits,
    *,
    test_timeout_s: float = 10.0,
    test_runner: str = "unittest",
    hidden: list[str] | tuple[str, ...] = (),
) -> dict[str, TestResult]:
    """One sandboxed run of a driver over ``workspace``: :mod:`gym_repo.runner` (``runner``, its
    source; ``_driver.py``, the drivers' shared part, goes beside it) for unittest ids,
    :mod:`gym_repo.pytest_runner` for pytest node ids (``hidden``: the hidden test files, which it
    puts back before each test). ``sandbox``: a :class:`Sandbox` (a sandbox for the run) or a
    :class:`SandboxPool` (a job in one of its workers). A result per test id (each test stopped, and
    failed, after ``test_timeout_s``)."""
    ids = list(dict.fromkeys(test_ids))
    nonce = secrets.token_hex(16)
    job = {"ids": ids, "test_timeout_s": test_timeout_s, "hidden": list(hidden)}
    interpreter = sandbox.sandbox.interpreter if isinstance(sandbox, SandboxPool) else sandbox.interpreter
    extra = {"prelude.sh": prelude(workspace, interpreter).encode(), "tests.json": json.dumps(job).encode()}
    if test_runner == "pytest":
        extra.update(await asyncio.to_thread(pytest_driver))
        driver = "pytest_runner.py"
    else:
        extra["runner.py"] = runner
        extra[SHARED] = resources.files("gym_repo").joinpath(SHARED).read_bytes()
        driver = "runner.py"
    script = f"sh {META}/prelude.sh >/dev/null 2>&1; cd {WORK} && exec {META}/bin/python -I -S -B {META}/{driver}"
    run = await sandbox.run(
        ["/bin/sh", "-c", script], stdin=(nonce + "\n").encode(), files=sandbox_files(workspace, extra), limits=limits
    )
    results: dict[str, TestResult] = {}
    for line in run.stdout.decode(errors="replace").splitlines():
        if not line.startswith(nonce + " "):
            continue
        try:
            item = json.loads(line[len(nonce) + 1 :])
        except json.JSONDecodeError:
            continue
        if item.get("test") in ids and item["test"] not in results:
            results[item["test"]] = TestResult(
                test=item["test"], passed=item["passed"] is True, detail=str(item["detail"])
            )
    for test_id in ids:
        if test_id not in results:
            results[test_id] = TestResult(test=test_id, passed=False, detail=f"no result ({run.outcome})")
    return results
