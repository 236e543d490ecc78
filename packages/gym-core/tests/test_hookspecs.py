"""The hook specifications: naming, documentation, and what pluggy sees."""

from __future__ import annotations

import inspect

import pluggy
import pytest

from gym_core import hookspecs
from gym_core.plugins import PluginManager, hook_names

SPECS = {name: fn for name, fn in vars(hookspecs).items() if inspect.isfunction(fn) and hasattr(fn, "gym_spec")}


def test_there_are_hooks_and_hook_names_lists_exactly_them():
    assert {"gym_register_servers", "gym_register_commands", "gym_aggregate_metrics"} <= set(SPECS)
    assert sorted(SPECS) == hook_names()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hook_is_prefixed_gym(name):
    assert name.startswith("gym_")


@pytest.mark.parametrize("name", sorted(SPECS))
def test_hook_docstring_documents_parameters_return_and_firstresult(name):
    fn = SPECS[name]
    doc = inspect.getdoc(fn)
    assert doc, f"{name} has no docstring"
    for param in inspect.signature(fn).parameters:
        assert f":param {param}:" in doc, f"{name}: parameter {param!r} is not documented"
    assert ":returns:" in doc, f"{name}: the return value is not documented"
    firstresult = fn.gym_spec["firstresult"]
    if firstresult:
        assert "firstresult" in doc and "Not firstresult" not in doc, name
    else:
        assert "Not firstresult" in doc, f"{name} must say it is not firstresult"


def test_every_hook_is_in_all_and_known_to_the_plugin_manager():
    assert set(SPECS) <= set(hookspecs.__all__)
    pm = PluginManager(load_entry_points=False)
    for name in SPECS:
        caller = getattr(pm._pm.hook, name)
        assert caller.spec is not None, f"{name} is not registered as a hookspec"
        assert list(caller.spec.argnames) == list(inspect.signature(SPECS[name]).parameters)


def test_markers_use_the_gym_project_name():
    assert isinstance(hookspecs.hookspec, pluggy.HookspecMarker)
    assert isinstance(hookspecs.hookimpl, pluggy.HookimplMarker)
    assert hookspecs.hookspec.project_name == "gym"
    assert hookspecs.hookimpl.project_name == "gym"
