"""Bug-fix tasks made offline, without end: ``gym repo-tasks generate -n N --seed S``.

Each task is one generated repository (a package of modules built from :mod:`gym_repo.library`,
with ``unittest`` tests whose expected values come from the correct code) and one semantic mutation
of one of its functions, made with :mod:`ast` and written back with :func:`ast.unparse`:

- ``operator``: an arithmetic, comparison or boolean operator swapped (``+``/``-``, ``<``/``<=``,
  ``and``/``or``, ``in``/``not in``...);
- ``off_by_one``: an integer constant moved by one;
- ``wrong_branch``: an ``if``'s or a conditional expression's test negated;
- ``dropped_statement``: an assignment, augmented assignment or call statement removed.

A mutation is kept only when the tests, run in gym's sandbox, go from all passing (the correct
code) to some failing (the mutated code); the failing tests become ``tests_to_fix``, the others
``tests_to_keep``, and the issue text is written from the first failing test. The reference fix is
the unified diff back to the correct code. The same seed gives the same tasks: every choice is
drawn from a :class:`random.Random` seeded per task (``seed`` and the task's index), and tasks are
chosen in index order whatever order the sandbox finishes them in.
"""

from __future__ import annotations

import ast
import asyncio
import copy
import difflib
import json
import random
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gym_core.sandbox import Sandbox, SandboxLimits

from gym_repo.library import FUNCTIONS, TOPICS, Function
from gym_repo.server import run_hidden_tests
from gym_repo.workspace import load_repository

__all__ = ["generate_tasks", "make_repository", "mutations", "SYSTEM_PROMPT"]

PACKAGES = ("toolkit", "helpers", "utilkit", "corelib", "basics", "smalllib", "handy", "stdplus", "minilib", "pylets")

SYSTEM_PROMPT = (
    "You are working in a Python repository, in its root directory. Fix the bug the user reports by changing the "
    "repository's code. Use the tools: run_command (a shell command), read_file, write_file, list_files, apply_patch. "
    "The repository's hidden tests decide whether the bug is fixed; keep the rest of the behaviour as it is. "
    "When you are done, answer with a short summary."
)

_SWAPS: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Add,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.And: ast.Or,
    ast.Or: ast.And,
}


@dataclass(frozen=True)
class Mutation:
    kind: str  # operator, off_by_one, wrong_branch, dropped_statement
    function: str
    line: int
    description: str


def _sites(tree: ast.Module) -> list[tuple[str, str, int, int]]:
    """Every place a mutation can go: (kind, function, node index in ast.walk order, line)."""
    sites: list[tuple[str, str, int, int]] = []
    for func in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        for index, node in enumerate(ast.walk(func)):
            line = getattr(node, "lineno", func.lineno)
            if isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _SWAPS:
                sites.append(("operator", func.name, index, line))
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _SWAPS:
                sites.append(("operator", func.name, index, line))
            elif isinstance(node, ast.BoolOp):
                sites.append(("operator", func.name, index, line))
            elif isinstance(node, ast.Constant) and type(node.value) is int:
                sites.append(("off_by_one", func.name, index, line))
            elif isinstance(node, ast.If | ast.IfExp):
                sites.append(("wrong_branch", func.name, index, line))
            if isinstance(node, ast.FunctionDef | ast.For | ast.While | ast.If):
                for body in (node.body, getattr(node, "orelse", [])):
                    if len(body) > 1:
                        for stmt in body:
                            if isinstance(stmt, ast.Assign | ast.AugAssign | ast.Expr) and not _is_docstring(stmt):
                                sites.append(("dropped_statement", func.name, _index_of(func, stmt), stmt.lineno))
    return sorted(set(sites), key=lambda s: (s[1], s[2], s[0]))


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _index_of(func: ast.FunctionDef, target: ast.AST) -> int:
    return next(i for i, n in enumerate(ast.walk(func)) if n is target)


def mutations(source: str) -> list[tuple[str, Mutation]]:
    """Every mutation of ``source`` (a module): the mutated source (``ast.unparse``) and what changed."""
    tree = ast.parse(source)
    out: list[tuple[str, Mutation]] = []
    for kind, function, index, line in _sites(tree):
        mutated = copy.deepcopy(tree)
        func = next(n for n in mutated.body if isinstance(n, ast.FunctionDef) and n.name == function)
        node = list(ast.walk(func))[index]
        description = _apply(kind, node, func)
        if description is None:
            continue
        ast.fix_missing_locations(mutated)
        text = ast.unparse(mutated) + "\n"
        if text != source:
            out.append((text, Mutation(kind, function, line, description)))
    return out


def _apply(kind: str, node: ast.AST, func: ast.FunctionDef) -> str | None:
    if kind == "operator":
        if isinstance(node, ast.Compare):
            old = node.ops[0]
            node.ops = [_SWAPS[type(old)]()]
            return f"{type(old).__name__} -> {type(node.ops[0]).__name__}"
        if isinstance(node, ast.BinOp | ast.AugAssign | ast.BoolOp):
            old = node.op
            node.op = _SWAPS[type(old)]()
            return f"{type(old).__name__} -> {type(node.op).__name__}"
    if kind == "off_by_one" and isinstance(node, ast.Constant) and type(node.value) is int:
        old_value = node.value
        node.value = old_value + 1 if old_value <= 0 else old_value - 1
        return f"{old_value} -> {node.value}"
    if kind == "wrong_branch" and isinstance(node, ast.If | ast.IfExp):
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
        return "condition negated"
    if kind == "dropped_statement" and isinstance(node, ast.stmt):
        for parent in ast.walk(func):
            for field in ("body", "orelse"):
                body = getattr(parent, field, None)
                if isinstance(body, list) and any(s is node for s in body) and len(body) > 1:
                    setattr(parent, field, [s for s in body if s is not node])
                    return f"statement removed: {ast.unparse(node)}"
    return None


# --- repositories --------------------------------------------------------------------------------


@dataclass
class Repository:
    package: str
    modules: dict[str, list[Function]]  # module name -> its functions
    files: dict[str, str]  # the package (what the model gets)
    tests: dict[str, str]  # the hidden tests
    test_calls: dict[str, tuple[str, str, Any]]  # test id -> (module.function, call text, expected value)


def _call_text(function: str, args: tuple) -> str:
    return f"{function}({', '.join(repr(a) for a in args)})"


def make_repository(rng: random.Random, runner: str = "unittest") -> Repository:
    """A package of two or three modules, two to three functions each, and its tests: ``unittest``
    classes (ids ``tests.test_MODULE.TestFUNCTION.test_K``) or, with ``runner="pytest"``, one
    parametrized pytest function per function (node ids ``tests/test_MODULE.py::test_FUNCTION[K]``).
    The same ``rng`` gives the same package and cases whichever the runner."""
    package = rng.choice(PACKAGES)
    topics = rng.sample(TOPICS, rng.randint(2, 3))
    modules: dict[str, list[Function]] = {}
    for topic in topics:
        pool = [f for f in FUNCTIONS if f.topic == topic]
        modules[topic] = sorted(rng.sample(pool, min(len(pool), rng.randint(2, 3))), key=lambda f: f.name)
    files = {f"{package}/__init__.py": f'"""{package}: small helpers."""\n'}
    tests: dict[str, str] = {"tests/__init__.py": ""}
    test_calls: dict[str, tuple[str, str, Any]] = {}
    for module, functions in modules.items():
        source = "\n\n".join(f.source.strip() for f in functions)
        files[f"{package}/{module}.py"] = ast.unparse(ast.parse(source)) + "\n"
        namespace: dict[str, Any] = {}
        exec(compile(files[f"{package}/{module}.py"], f"{package}/{module}.py", "exec"), namespace)  # our own code
        if runner == "pytest":
            tests[f"tests/test_{module}.py"] = _pytest_module(package, module, functions, namespace, test_calls)
            continue
        lines = ["import unittest", "", f"from {package} import {module}", ""]
        for function in functions:
            cls = "Test" + "".join(part.capitalize() for part in function.name.split("_"))
            lines += ["", f"class {cls}(unittest.TestCase):"]
            for k, args in enumerate(function.cases):
                expected = namespace[function.name](*copy.deepcopy(args))
                call = _call_text(function.name, args)
                lines += [f"    def test_{k}(self):", f"        self.assertEqual({module}.{call}, {expected!r})", ""]
                test_calls[f"tests.test_{module}.{cls}.test_{k}"] = (f"{module}.{function.name}", call, expected)
        tests[f"tests/test_{module}.py"] = "\n".join(lines).rstrip() + "\n"
    files["README.md"] = f"# {package}\n\nSmall helper functions: {', '.join(f'`{m}`' for m in modules)}.\n"
    return Repository(package, modules, files, tests, test_calls)


def _pytest_module(
    package: str, module: str, functions: list[Function], namespace: dict[str, Any], test_calls: dict
) -> str:
    """A pytest test module: for each function, a test parametrized over its cases (ids 0, 1...)."""
    lines = ["import pytest", "", f"from {package} import {module}", ""]
    for function in functions:
        cases = []
        for k, args in enumerate(function.cases):
            expected = namespace[function.name](*copy.deepcopy(args))
            cases.append(f"        ({args!r}, {expected!r}),")
            path = f"tests/test_{module}.py"
            test_calls[f"{path}::test_{function.name}[{k}]"] = (
                f"{module}.{function.name}",
                _call_text(function.name, args),
                expected,
            )
        ids = ", ".join(repr(str(k)) for k in range(len(function.cases)))
        lines += [
            "",
            "@pytest.mark.parametrize(",
            '    ("args", "expected"),',
            "    [",
            *cases,
            "    ],",
            f"    ids=[{ids}],",
            ")",
            f"def test_{function.name}(args, expected):",
            f"    assert {module}.{function.name}(*args) == expected",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


# --- tasks ---------------------------------------------------------------------------------------


def _symptom(detail: str) -> str:
    """What the broken code does, from a failing test's report: ``returns `X` `` or ``raises E: ...``."""
    match = re.search(r"AssertionError: (?:\w+ differ: )?(.*?) != ", detail)
    if match:
        return f"returns `{match.group(1)}`"
    match = re.search(r"^E\s+assert (.*?) == ", detail, re.MULTILINE)  # pytest's report
    if match:
        return f"returns `{match.group(1)}`"
    errors = re.findall(r"^E\s+(\w+(?:Error|Exception)\b.*)$", detail, re.MULTILINE)
    if errors:
        return f"raises `{errors[-1].strip()}`"
    lines = [line.strip() for line in detail.strip().splitlines() if line.strip()]
    return f"raises `{lines[-1]}`" if lines else "fails"


def issue_text(repo: Repository, failing: str, detail: str, path: str) -> str:
    qualified, call, expected = repo.test_calls[failing]
    module, function = qualified.split(".")
    return (
        f"`{function}` in `{path}` is wrong: `{call}` (`from {repo.package}.{module} import {function}`) "
        f"{_symptom(detail)}, but it should return `{expected!r}`. Please fix it without changing its other behaviour."
    )


def _diff(path: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))


async def _task(
    index: int,
    seed: int,
    sandbox: Sandbox,
    runner: bytes,
    limits: SandboxLimits,
    max_tries: int,
    test_runner: str = "unittest",
) -> dict[str, Any] | None:
    rng = random.Random(f"gym-repo-tasks:{seed}:{index}")
    repo = make_repository(rng, test_runner)
    test_ids = sorted(repo.test_calls)
    workspace = load_repository({**repo.files, **repo.tests}, max_bytes=16 << 20)
    hidden = list(repo.tests)

    async def run(workspace: Any) -> dict[str, Any]:
        return await run_hidden_tests(
            sandbox, workspace, test_ids, runner, limits, test_runner=test_runner, hidden=hidden
        )

    correct = await run(workspace)
    broken_by_us = [t for t, r in correct.items() if not r.passed]
    if broken_by_us:  # the library's own tests fail: a bug in gym, said loudly
        raise RuntimeError(f"the correct repository fails its tests: {broken_by_us[:3]}: {correct[broken_by_us[0]]}")
    candidates = [(module, m) for module in repo.modules for m in mutations(repo.files[f"{repo.package}/{module}.py"])]
    rng.shuffle(candidates)
    for module, (mutated, mutation) in candidates[:max_tries]:
        path = f"{repo.package}/{module}.py"
        broken_files = {**repo.files, path: mutated}
        broken = await run(load_repository({**broken_files, **repo.tests}, max_bytes=16 << 20))
        failing = [t for t in test_ids if not broken[t].passed]
        if not failing or any(broken[t].detail.startswith(("no result", "timed out")) for t in failing):
            continue  # an equivalent mutation, or one that hangs: not a task
        issue = issue_text(repo, failing[0], broken[failing[0]].detail, path)
        task_id = f"repo-{seed}-{index:05d}" if test_runner == "unittest" else f"repo-{test_runner}-{seed}-{index:05d}"
        row = {
            "task_id": task_id,
            "responses_create_params": {
                "input": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": issue},
                ]
            },
            "issue": issue,
            "repository": broken_files,
            "hidden_tests": repo.tests,
            "tests_to_fix": failing,
            "tests_to_keep": [t for t in test_ids if t not in failing],
            "reference_patch": _diff(path, mutated, repo.files[path]),
            "mutation": {"path": path, "kind": mutation.kind, "function": mutation.function,
                         "line": mutation.line, "change": mutation.description},
        }  # fmt: skip
        if test_runner != "unittest":
            row["test_runner"] = test_runner
        return row
    return None


async def generate_tasks(
    n: int,
    seed: int = 0,
    *,
    concurrency: int = 2,
    sandbox: Sandbox | None = None,
    max_tries: int = 12,
    runner: str = "unittest",
) -> list[dict[str, Any]]:
    """``n`` validated tasks for ``seed``: the same list for the same arguments. A repository whose
    first ``max_tries`` mutations break no test gives no task; the next index is tried. ``runner``:
    the hidden tests' framework (``unittest``, or ``pytest``: the same packages and cases as pytest
    tests, rows with ``test_runner: "pytest"``)."""
    if runner not in ("unittest", "pytest"):
        raise ValueError(f"unknown test runner {runner!r}: unittest or pytest")
    if sandbox is None:
        sandbox = Sandbox("bwrap", max_concurrency=concurrency)
    await sandbox.start()
    driver = resources.files("gym_repo").joinpath("runner.py").read_bytes()
    slow = runner == "pytest"  # pytest's start in each test's fork
    limits = SandboxLimits(
        wall_time_s=40 if slow else 10, cpu_time_s=20 if slow else 5, memory_mb=512, processes=16, scratch_mb=64
    )
    tasks: list[dict[str, Any]] = []
    index = 0
    limit = asyncio.Semaphore(concurrency)

    async def one(i: int) -> dict[str, Any] | None:
        async with limit:
            return await _task(i, seed, sandbox, driver, limits, max_tries, runner)

    while len(tasks) < n:
        batch = range(index, index + max(concurrency, n - len(tasks)))
        index = batch.stop
        for task in await asyncio.gather(*(one(i) for i in batch)):
            if task is not None and len(tasks) < n:
                tasks.append(task)
        if index > 20 * n + 100:
            raise RuntimeError(f"only {len(tasks)} of {n} tasks after {index} repositories")
    return tasks


def write_jsonl(tasks: list[dict[str, Any]], path: str) -> None:
    with open(path, "w") as handle:
        for task in tasks:
            handle.write(json.dumps(task) + "\n")
