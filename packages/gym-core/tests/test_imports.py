"""gym-core's import structure: no cycle between its modules, leaf modules stay leaves, and the
names every plugin imports first are cheap (no server framework, no plugin's server module)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gym_core

PACKAGE_DIR = Path(gym_core.__file__).parent
MODULES = sorted(p.stem for p in PACKAGE_DIR.glob("*.py") if p.stem != "__init__")

# Modules many others share: they may import only these (and third-party/stdlib modules).
LEAVES = {
    "failures": set(),
    "errors": {"failures"},
    "options": {"errors"},
    "registry": {"errors", "options"},
    "hookspecs": set(),
    "process_tuning": set(),
}

HEAVY = ("litestar", "aiohttp", "uvicorn", "omegaconf", "hydra", "yaml")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(module: str, *, type_checking: bool = False) -> set[str]:
    """The gym_core modules ``module`` imports at runtime: at the top level or inside functions
    (a deferred import is a cycle hidden, not removed); with ``type_checking``, also the imports
    under ``if TYPE_CHECKING``."""
    tree = ast.parse((PACKAGE_DIR / f"{module}.py").read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "gym_core":
                found.update(alias.name for alias in node.names if alias.name in MODULES)
            elif node.module.startswith("gym_core."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gym_core."):
                    found.add(alias.name.split(".")[1])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(module)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = walk(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            if cycle:
                return cycle
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


def test_gym_core_modules_form_no_import_cycle_at_runtime():
    """Fix: move the shared type to a leaf module (options, registry), or import it under
    TYPE_CHECKING when it is only needed in annotations."""
    graph = {module: runtime_imports(module) for module in MODULES}
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


def test_gym_core_modules_form_no_cycle_even_through_type_annotations():
    """The modules are layered: leaves (errors, options, registry, schemas) under the rest, so
    even annotation-only imports go one way. Fix as above."""
    graph = {module: runtime_imports(module, type_checking=True) for module in MODULES}
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaf_modules_import_only_leaves(leaf):
    assert runtime_imports(leaf) <= LEAVES[leaf]


def _modules_after(code: str) -> list[str]:
    """The modules loaded by a fresh interpreter after running ``code``."""
    script = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def test_hookimpl_and_option_types_import_no_server_framework():
    """``from gym_core import hookimpl, ServerConfig`` opens every plugin and config module."""
    loaded = _modules_after("from gym_core import hookimpl, ServerConfig, ModelRef, ResourcesRef")
    heavy = [m for m in loaded if m.split(".")[0] in HEAVY]
    assert heavy == []
    assert "gym_core.servers" not in loaded and "gym_core.config" not in loaded


def test_listing_plugins_imports_no_server_module():
    """Listing plugins (what `gym plugin list` and `gym --help` do) must not import any plugin's
    server module or a server framework. Fix: register ``server="pkg.server:Class"`` as a string and
    keep the options struct in a light ``config.py``."""
    loaded = _modules_after(
        "from gym_core.plugins import get_plugin_manager\n"
        "pm = get_plugin_manager()\n"
        "types = pm.servers()\n"
        "assert {'math', 'counter', 'simple_agent', 'scripted'} <= set(types), sorted(types)"
    )
    servers = [m for m in loaded if m.endswith(".server") or ".server." in m]
    assert servers == []
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []


def test_tuning_the_collector_imports_no_server_framework():
    """`gym collect` tunes its garbage collector before its loop starts: that must not cost it the
    server stack. Fix: keep :func:`tune_gc` in the leaf ``process_tuning`` (``serving`` re-exports it)."""
    loaded = _modules_after("from gym_core.process_tuning import tune_gc\ntune_gc()")
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    from gym_core import process_tuning, serving

    assert serving.tune_gc is process_tuning.tune_gc


def test_lazy_names_resolve_to_their_defining_module():
    for name, module in gym_core._EXPORTS.items():
        value = getattr(gym_core, name)
        assert getattr(sys.modules[module], name) is value
    assert set(gym_core.__all__) == set(gym_core._EXPORTS)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        gym_core.nope  # noqa: B018
