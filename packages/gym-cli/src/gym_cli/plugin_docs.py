"""A plugin package's README and example data, checked and kept current: what ``gym plugin docs``
writes and what ``gym test`` and ``gym plugin build`` check (CONTRIBUTING.md, "New environment").

- Every plugin README has the sections of its kind, under fixed headings, in this order
  (:data:`HEADINGS`); a plugin implementing ``gym_aggregate_metrics`` also has ``## Metrics``.
- Its ``## Options`` section holds, for each server type the package registers, the table that
  ``gym plugin show NAME --markdown`` prints (:func:`options_markdown`), generated from the config
  struct's ``Meta`` descriptions between two marker comments, so it never drifts from the code.
- An environment ships example tasks: ``data/example.jsonl``, one JSON object per line.
- Its metrics (``gym_aggregate_metrics``) are named ``<server type>/...``: checked on its
  ``data/example_rollouts.jsonl`` when it has one.

What a package registers is read by loading its plugin modules from its source tree in a separate
interpreter (:func:`describe_packages`), never in the process running gym.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_core.errors import GymError

__all__ = [
    "HEADINGS",
    "METRICS_HEADING",
    "PackageDocs",
    "ServerDocs",
    "options_markdown",
    "required_headings",
    "readme_headings",
    "describe_packages",
    "render_readme",
    "check_package",
    "shown_path",
    "write_package",
]

# The `##` sections every plugin README has, by kind, in the order they appear. Other sections
# (`## Tools`, `## Failures`, `## Differences from the reference`, `## Tests`...) may sit anywhere.
HEADINGS: dict[str, tuple[str, ...]] = {
    "resources": ("Rows", "Reward", "Options", "Example"),
    "agent": ("How a rollout runs", "Result", "Options", "Example"),
    "model": ("Options", "Example"),
}
# Required, after Options, of a plugin that contributes metrics to `gym profile`.
METRICS_HEADING = "Metrics"
_ORDER = ("Rows", "Reward", "How a rollout runs", "Result", "Options", METRICS_HEADING, "Example")
EXAMPLE_DATA = Path("data") / "example.jsonl"
REGENERATE = "gym plugin docs"

_BLOCK = re.compile(
    r"^<!-- options (?P<name>[a-z0-9_]+): begin[^\n]*-->\n(?P<body>.*?)^<!-- options (?P=name): end -->\n?",
    re.MULTILINE | re.DOTALL,
)


def _begin(name: str) -> str:
    return f"<!-- options {name}: begin (generated from the config's descriptions by `{REGENERATE}`) -->"


def _end(name: str) -> str:
    return f"<!-- options {name}: end -->"


# --- the Options table -------------------------------------------------------------------------------


def _escape(text: str) -> str:
    """``text`` safe in a Markdown table cell: pipes escaped everywhere (GFM reads them even inside
    code spans); outside code spans, ``<`` (else ``<think>`` is read as HTML and vanishes) and ``*``."""
    text = " ".join(text.split())
    parts = re.split(r"(`+[^`]*`+)", text)
    for i, part in enumerate(parts):
        if not part.startswith("`"):
            part = part.replace("\\", "\\\\").replace("<", "\\<").replace("*", "\\*")
        parts[i] = part.replace("|", "\\|")
    return "".join(parts)


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}".replace("|", "\\|")


def _default_cell(option: dict[str, Any], width: int = 40) -> str:
    if option["required"]:
        return "required"
    text = json.dumps(option["default"], ensure_ascii=False)
    if len(text) > width:  # a long prompt or nested struct: its start says what it is
        return _code(text[: width - 1].rstrip()) + "…"
    return _code(text)


def options_markdown(options: list[dict[str, Any]]) -> str:
    """A server type's own options as a Markdown table (option, type, default, description), then one
    line pointing at the options every server has. ``options``: :class:`gym_core.options.OptionInfo` as dicts."""
    own = [o for o in options if not o["inherited"]]
    lines = []
    if own:
        lines += ["| option | type | default | description |", "| --- | --- | --- | --- |"]
        for option in own:
            lines.append(
                f"| `{option['name']}` | {_code(option['type'])} | {_default_cell(option)} | "
                f"{_escape(option['description']) or '-'} |"
            )
        lines.append("")
        lines.append(
            "Also the options every server has (`host`, `port`, `client`...): `gym plugin show NAME` lists them."
        )
    else:
        lines.append(
            "No options of its own; the options every server has (`host`, `port`, `client`...): "
            "`gym plugin show NAME` lists them."
        )
    return "\n".join(lines) + "\n"


# --- what a package registers ------------------------------------------------------------------------


@dataclass
class ServerDocs:
    """A server type a package registers: its name, kind and options (as dicts)."""

    name: str
    kind: str
    options: list[dict[str, Any]]


@dataclass
class PackageDocs:
    """What the plugin package in ``directory`` registers, read from its source tree: its server
    types, whether it contributes metrics, or why it could not be loaded (``error``)."""

    directory: Path
    servers: list[ServerDocs] = field(default_factory=list)
    metrics: bool = False
    error: str | None = None
    # What its gym_aggregate_metrics names on data/example_rollouts.jsonl (None: no such file or hook).
    metric_names: list[str] | None = None

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys(s.kind for s in self.servers))


# Runs with the Python given to describe_packages (a plugin's venv, or the one running gym): loads each
# package's `gym` entry-point modules from its source tree into a plugin manager of its own (no
# installed plugin involved) and prints, as its last line, what they register.
_DESCRIBE_SCRIPT = r"""
import importlib, json, sys, tomllib
from dataclasses import asdict
from pathlib import Path

from gym_core.options import describe_options
from gym_core.plugins import PluginManager

answer = {}
for directory in map(Path, sys.argv[1:]):
    found = {"servers": [], "metrics": False, "error": None}
    answer[str(directory)] = found
    try:
        project = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
        entry_points = (project.get("entry-points") or {}).get("gym") or {}
        for root in (directory / "src", directory):
            if root.is_dir() and str(root) not in sys.path:
                sys.path.insert(0, str(root))
        manager = PluginManager(load_entry_points=False)
        for name, value in entry_points.items():
            module = importlib.import_module(value.split(":")[0])
            manager.register(module, name=name)
            found["metrics"] = found["metrics"] or hasattr(module, "gym_aggregate_metrics")
        for server in manager.servers().values():
            found["servers"].append({"name": server.name, "kind": server.kind,
                                     "options": [asdict(o) for o in describe_options(server.config)]})
        rollouts = directory / "data" / "example_rollouts.jsonl"
        if found["metrics"] and rollouts.is_file():
            rows = [json.loads(line) for line in rollouts.read_text().splitlines() if line.strip()]
            found["metric_names"] = sorted(manager.aggregate_metrics(rows)) if rows else []
    except BaseException as exc:
        found["error"] = f"{type(exc).__name__}: {exc}"
print("GYM-DOCS " + json.dumps(answer, default=str))
"""


def describe_packages(directories: list[Path], python: str | None = None) -> list[PackageDocs]:
    """What each package in ``directories`` registers, loaded from its source with ``python``
    (default: the Python running gym) in one separate interpreter."""
    directories = [d.resolve() for d in directories]
    if not directories:
        return []
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    try:
        proc = subprocess.run(
            [python or sys.executable, "-c", _DESCRIBE_SCRIPT, *map(str, directories)],
            capture_output=True,
            text=True,
            errors="replace",
            env=environ,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [PackageDocs(d, error=f"cannot run {python or sys.executable}: {exc}") for d in directories]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("GYM-DOCS ")]
    if not lines:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return [PackageDocs(d, error=f"loading its plugin modules failed: {tail}") for d in directories]
    answer = json.loads(lines[-1][len("GYM-DOCS ") :])
    described = []
    for directory in directories:
        found = answer[str(directory)]
        servers = [ServerDocs(s["name"], s["kind"], s["options"]) for s in found["servers"]]
        described.append(PackageDocs(directory, servers, found["metrics"], found["error"], found.get("metric_names")))
    return described


# --- the README --------------------------------------------------------------------------------------


_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def _outside_code(lines: list[str]) -> list[bool]:
    """For each line, whether it is outside a fenced code block (CommonMark's rules, enough of them:
    a backtick fence's info string holds no backtick, a closing fence is as long and bare)."""
    outside, fence = [], ""
    for line in lines:
        match = _FENCE.match(line.rstrip("\n"))
        if not fence:
            if match and not (match["fence"][0] == "`" and "`" in match["info"]):
                fence = match["fence"]
                outside.append(False)
                continue
            outside.append(True)
        else:
            if (
                match
                and match["fence"][0] == fence[0]
                and len(match["fence"]) >= len(fence)
                and not match["info"].strip()
            ):
                fence = ""
            outside.append(False)
    return outside


def readme_headings(text: str) -> list[str]:
    """The ``##`` headings of a Markdown text, outside fenced code blocks, as written."""
    lines = text.splitlines()
    return [line[3:].strip() for line, out in zip(lines, _outside_code(lines)) if out and line.startswith("## ")]


def required_headings(kinds: list[str], metrics: bool) -> list[str]:
    """The ``##`` headings a README must have, in order, for a package registering server types of
    ``kinds`` (and contributing metrics when ``metrics``)."""
    wanted = {heading for kind in kinds for heading in HEADINGS.get(kind, ())}
    if metrics:
        wanted.add(METRICS_HEADING)
    return [heading for heading in _ORDER if heading in wanted]


def _options_section(text: str) -> tuple[int, int] | None:
    """The span of the ``## Options`` section's body (after its heading line), outside code blocks."""
    start, offset = None, 0
    lines = text.splitlines(keepends=True)
    for line, out in zip(lines, _outside_code(lines)):
        if out and line.startswith("## "):
            if start is not None:
                return start, offset
            if line[3:].strip() == "Options":
                start = offset + len(line)
        offset += len(line)
    return (start, len(text)) if start is not None else None


def render_readme(text: str, package: PackageDocs) -> str:
    """``text`` with the Options table of each server type of ``package`` generated afresh: a block
    already there is replaced, a missing one is added at the top of ``## Options`` (when the README
    has that section), the block of a server type the package no longer registers is removed."""
    tables = {server.name: options_markdown(server.options) for server in package.servers}

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in tables:
            return ""
        return f"{_begin(name)}\n{tables[name]}{_end(name)}\n"

    text = _BLOCK.sub(replace, text)
    present = {m["name"] for m in _BLOCK.finditer(text)}
    missing = [name for name in tables if name not in present]
    span = _options_section(text)
    if missing and span is not None:
        blocks = []
        for name in missing:
            label = f"`{name}`:\n\n" if len(tables) > 1 else ""  # which server type, when there are several
            blocks.append(f"\n{label}{_begin(name)}\n{tables[name]}{_end(name)}\n")
        text = text[: span[0]] + "".join(blocks) + text[span[0] :]
    return text


def _example_data_problems(directory: Path) -> list[str]:
    path = directory / EXAMPLE_DATA
    if not path.is_file():
        return [
            f"{EXAMPLE_DATA} is missing: an environment ships example tasks, one JSON object per line "
            "(the conformance kit runs them)"
        ]
    rows = 0
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            return [f"{EXAMPLE_DATA} line {number} is not JSON: {exc}"]
        if not isinstance(row, dict):
            return [f"{EXAMPLE_DATA} line {number} is not a JSON object"]
        rows += 1
    return [] if rows else [f"{EXAMPLE_DATA} holds no tasks: add at least one row"]


def check_package(package: PackageDocs, *, shown: str | None = None) -> tuple[list[str], list[str]]:
    """What is wrong with the README and example data of ``package`` (problems), and what could not be
    checked (notes). ``shown``: how to name the package in the fix-it hint (default: its directory)."""
    directory, where = package.directory, shown or str(package.directory)
    problems: list[str] = []
    notes: list[str] = []
    readme = directory / "README.md"
    if package.error is not None:
        notes.append(
            f"its README's Options tables and sections are not checked: its plugin modules do not load "
            f"({package.error})"
        )
    if not readme.is_file():
        return ["README.md is missing: every plugin has one (`gym plugin new` writes it)"], notes
    text = readme.read_text(encoding="utf-8", errors="replace")
    if not text.lstrip().startswith("# "):
        problems.append("README.md does not start with a title (`# gym-my-env`) and a paragraph saying what it is")
    headings = readme_headings(text)
    wanted = required_headings(package.kinds, package.metrics)
    missing = [h for h in wanted if h not in headings]
    kinds = " and ".join(package.kinds)
    article = "an" if kinds[:1] in "aeiou" else "a"
    if missing:
        problems.append(
            f"README.md lacks the section{'s' if len(missing) > 1 else ''} "
            + ", ".join(f"`## {h}`" for h in missing)
            + f" ({article} {kinds} plugin's README has "
            + ", ".join(f"`## {h}`" for h in wanted)
            + ", in order)"
        )
    else:
        found = [h for h in headings if h in wanted]
        found = list(dict.fromkeys(found))
        if found != wanted:
            problems.append(
                "README.md's sections are out of order: "
                + ", ".join(f"`## {h}`" for h in found)
                + "; the order is "
                + ", ".join(f"`## {h}`" for h in wanted)
            )
    if package.servers and "Options" in headings:
        current = {m["name"]: m["body"] for m in _BLOCK.finditer(text)}
        for server in package.servers:
            if server.name not in current:
                problems.append(
                    f"README.md's `## Options` has no generated table of `{server.name}`: run `{REGENERATE} {where}`"
                )
            elif current[server.name] != options_markdown(server.options):
                problems.append(
                    f"README.md's Options table of `{server.name}` is out of date with its config: "
                    f"run `{REGENERATE} {where}`"
                )
        registered = {server.name for server in package.servers}
        for name in current:
            if name not in registered:
                problems.append(
                    f"README.md has an Options table of `{name}`, which the package does not register: "
                    f"run `{REGENERATE} {where}`"
                )
    if "resources" in package.kinds:
        problems += _example_data_problems(directory)
    prefixes = tuple(f"{server.name}/" for server in package.servers)
    unprefixed = [name for name in package.metric_names or () if prefixes and not name.startswith(prefixes)]
    if unprefixed:
        problems.append(
            f"gym_aggregate_metrics names {', '.join(unprefixed)} without the environment's prefix "
            f"({' or '.join(prefixes)}): metrics of all plugins share one name space"
        )
    return problems, notes


def shown_path(directory: Path, base: Path) -> str:
    """``directory`` as a message names it: relative to ``base`` when it is under it."""
    base = base.resolve()
    return str(directory.relative_to(base)) if directory.is_relative_to(base) else str(directory)


def write_package(package: PackageDocs) -> bool:
    """Regenerate the Options tables of ``package``'s README; True when the file changed."""
    if package.error is not None:
        raise GymError(
            f"{package.directory}: its plugin modules do not load, so its options are unknown: {package.error}"
        )
    readme = package.directory / "README.md"
    if not readme.is_file():
        return False
    text = readme.read_text(encoding="utf-8")
    rendered = render_readme(text, package)
    if rendered == text:
        return False
    readme.write_text(rendered, encoding="utf-8")
    return True
