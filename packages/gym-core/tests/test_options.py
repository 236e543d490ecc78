"""Option types: references to other instances, and option descriptions for `gym plugin show`."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import pytest
from msgspec import Meta

from gym_core.options import (
    ClientConfig,
    ModelRef,
    ResourcesRef,
    ServerConfig,
    ServerRef,
    describe_options,
    ref_of,
)


class ExampleConfig(ServerConfig, kw_only=True):
    policy: Annotated[ModelRef, Meta(description="who answers")]
    judge: ModelRef | None = None
    anything: ServerRef | None = None
    mode: Annotated[Literal["fast", "exact"], Meta(description="how to grade")] = "exact"
    tags: list[str] = msgspec.field(default_factory=list)
    undocumented: int = 3


def test_ref_of_finds_the_kind_also_inside_optional():
    assert ref_of(ModelRef).kind == "model"
    assert ref_of(ResourcesRef).kind == "resources"
    assert ref_of(ModelRef | None).kind == "model"
    assert ref_of(Annotated[ModelRef, Meta(description="x")]).kind == "model"
    assert ref_of(ServerRef).kind is None
    assert ref_of(str) is None and ref_of(int | None) is None


def test_describe_options_gives_type_default_and_description():
    options = {o.name: o for o in describe_options(ExampleConfig)}
    policy = options["policy"]
    assert (policy.type, policy.required, policy.description, policy.inherited) == (
        "model server name",
        True,
        "who answers",
        False,
    )
    assert options["judge"].type == "model server name | None" and options["judge"].default is None
    assert options["anything"].type == "server name | None"
    assert (options["mode"].type, options["mode"].default, options["mode"].description) == (
        "'fast' | 'exact'",
        "exact",
        "how to grade",
    )
    assert options["tags"].type == "list[str]" and options["tags"].default == []
    assert options["undocumented"].description == "" and options["undocumented"].default == 3


def test_options_every_server_has_are_marked_inherited_and_described():
    options = {o.name: o for o in describe_options(ExampleConfig)}
    for name in ("host", "port", "max_body_bytes", "session_ttl_s", "session_secret", "client"):
        assert options[name].inherited, name
        assert options[name].description, f"ServerConfig.{name} has no description"
    assert options["client"].default == msgspec.to_builtins(ClientConfig())
    for option in describe_options(ClientConfig):
        assert option.description, f"ClientConfig.{option.name} has no description"


def test_option_constraints_still_validate():
    # Meta(description=...) sits beside the constraints; both apply.
    with pytest.raises(msgspec.ValidationError, match="port"):
        msgspec.convert({"port": 70000}, ServerConfig)
    with pytest.raises(msgspec.ValidationError, match="max_attempts"):
        msgspec.convert({"max_attempts": 0}, ClientConfig)
