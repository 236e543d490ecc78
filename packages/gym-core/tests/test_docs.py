"""The hook reference, docs/plugin_hooks.md, documents every hook of gym_core.hookspecs."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from gym_core import hookspecs
from gym_core.plugins import hook_names

PAGE = Path(__file__).resolve().parents[3] / "docs" / "plugin_hooks.md"


@pytest.fixture(scope="module")
def sections() -> dict[str, str]:
    """The page's ``## name`` sections by heading."""
    text = PAGE.read_text()
    parts = re.split(r"^## +(\S+)\s*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


@pytest.mark.parametrize("hook", hook_names())
def test_every_hook_has_a_section_with_its_signature(hook, sections):
    """Fix: add a ``## <hook>`` section to docs/plugin_hooks.md with the hook's signature,
    parameters, the process that calls it and when, what it returns, and an example."""
    assert hook in sections, f"docs/plugin_hooks.md has no section for {hook}"
    body = sections[hook]
    params = ", ".join(inspect.signature(getattr(hookspecs, hook)).parameters)
    assert f"{hook}({params})" in body, f"the {hook} section does not show its signature"
    for part in ("**Parameters:**", "**Called by:**", "**Returns:**", "@hookimpl"):
        assert part in body, f"the {hook} section lacks {part}"


def test_the_page_documents_no_hook_that_does_not_exist(sections):
    documented = {name for name in sections if name.startswith("gym_")}
    assert documented == set(hook_names())
