"""Shared by every test of the workspace (pytest loads the rootdir's conftest.py first).

Test tiers. ``uv run pytest`` runs the fast tier: every test in no tier of ``TIERS``. ``uv run pytest
--full`` runs every test (what CI runs); ``-m TIER`` runs one tier (or an expression: ``-m "ray or
model"``, ``-m "not ray"``); naming files or folders (``uv run pytest plugins/models/local_llama``)
runs all their tests. A test's tiers come from its path in ``TIERS``, so that plugin authors need
not mark anything; the markers are registered in the root pyproject.toml (``--strict-markers``).
A run of the whole suite, fast tier or full, runs on two pytest-xdist workers (``-n 0``: one process).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Generator
from typing import Any

import pytest

# Tests stop the processes they start with SIGINT, as Ctrl+C. A shell running a command in the
# background (`cmd &` without job control, as CI runners and `nohup` do) starts it with SIGINT
# ignored, and an ignored signal stays ignored in every process started from it: gym run and gym
# collect would never see the tests' Ctrl+C. Handle it here, so that children start with SIGINT's
# default (Python then turns it into KeyboardInterrupt, as in a terminal).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# tier -> the tests it holds: a folder, a file, FILE::NAME for a test (all its parameters) or a class,
# FILE::NAME[ID] for one parameter set; paths from the repository root. A test may be in several tiers.
TIERS: dict[str, tuple[str, ...]] = {
    # Seconds to minutes each: the benchmark harness, the training venv (torch) and gym-train's tests
    # in it, a real browser, venvs built with uv (gym test, published packages, the template's plugins
    # tested in their own venvs), real process trees killed with -9 or restarted.
    "slow": (
        "tests/benchmarks",
        "tests/test_train_venv.py",
        "packages/gym-cli/tests/test_report_browser.py",
        "packages/gym-cli/tests/test_environments.py",
        "packages/gym-cli/tests/test_test_command.py",
        "packages/gym-cli/tests/test_replicas_run.py",
        "packages/gym-cli/tests/test_stop.py",
        "packages/gym-cli/tests/test_published.py::test_published_plugins_install_run_and_test_outside_the_repository",
        "packages/gym-cli/tests/test_plugin_template.py::test_generated_plugin_passes_its_own_tests",
        "packages/gym-cli/tests/test_plugin_template.py::test_install_then_test_in_the_isolated_environment",
        "packages/gym-cli/tests/test_plugin_template.py::test_uv_run_pytest_runs_a_new_plugin_s_tests",
        "packages/gym-cli/tests/test_plugin_docs.py::test_gym_test_fails_on_a_readme_that_lacks_its_sections",
        "packages/gym-cli/tests/test_run.py::test_run_ready_then_ctrl_c_leaves_nothing_behind",
        "packages/gym-cli/tests/test_run.py::test_kill_9_takes_the_servers_down_and_the_next_run_on_the_same_ports_starts",
        "packages/gym-cli/tests/test_run.py::test_a_server_killed_after_start_up_comes_back_on_its_port_and_status_shows_the_restart",
        "packages/gym-cli/tests/test_run.py::test_when_the_restart_budget_is_spent_gym_run_exits_1_naming_the_server",
        "packages/gym-cli/tests/test_run.py::test_a_config_of_a_megabyte_starts_and_never_shows_in_the_environment_or_ps",
        "packages/gym-cli/tests/test_collect.py::test_kill_9_midway_loses_nothing",
        "packages/gym-cli/tests/test_collect.py::test_kill_9_of_a_server_mid_collection_ends_with_every_rollout_once_in_one_run",
        "packages/gym-cli/tests/test_collect.py::test_sessions_lost_in_a_restart_are_retried_not_scored",
        "packages/gym-cli/tests/test_collect.py::test_the_lock_is_released_when_its_holder_is_killed",
        "packages/gym-cli/tests/test_collect.py::test_second_collect_on_the_same_output_fails_fast_naming_the_first",
        "packages/gym-cli/tests/test_tracking.py::test_an_interrupted_collection_logs_its_counts_and_ends_failed",
        "packages/gym-cli/tests/test_redteam.py::test_every_first_party_environment_has_no_gameable_probe",
        "packages/gym-cli/tests/test_guide.py::test_the_guide_runs_as_written_when_port_11000_is_taken",
        "packages/gym-cli/tests/test_guide.py::test_a_command_that_talks_to_a_run_asks_which_when_several_run",
        "packages/gym-cli/tests/test_cli_output.py::test_collect_json_progress_clock_starts_with_the_rollouts_and_no_empty_failures_file",
        "plugins/resources/mcp_tools/tests/test_mcp_tools.py::test_example_config_solves_every_example",
        "packages/gym-cli/tests/test_mcp_serve.py::test_an_environment_failure_ends_the_episode_unscored",
    ),
    # Start a Ray cluster (joined by the test process, or by gym run).
    "ray": (
        "packages/gym-cli/tests/test_ray_cluster.py::test_each_server_runs_in_an_actor_on_the_node_asked_for",
        "packages/gym-cli/tests/test_ray_cluster.py::test_rollouts_keep_to_one_replica_across_nodes",
        "packages/gym-cli/tests/test_ray_cluster.py::test_a_replica_killed_mid_collection_is_restarted_in_its_actor_and_nothing_is_lost",
        "packages/gym-cli/tests/test_ray_cluster.py::test_resources_no_node_has_are_a_config_error_before_anything_starts",
        "packages/gym-cli/tests/test_ray_cluster.py::test_gym_status_says_which_node_each_server_runs_on",
        "packages/gym-cli/tests/test_ray_cluster.py::test_gym_stop_leaves_no_server_and_no_actor",
        "plugins/models/local_vllm/tests/test_ray_engines.py",
        "plugins/resources/code_gen/tests/test_ray_fanout.py",
        "tests/test_signal_handlers.py::test_a_ray_cluster_started_by_a_fixture_leaves_the_session_handlers",
    ),
    # Run the real local model: local_llama (SmolLM2 on llama.cpp) or llama-cpp-python's own server.
    "model": (
        "plugins/models/local_llama/tests",
        "plugins/resources/repo/tests/test_local_llama.py",
        "plugins/agents/mini_swe_agent/tests/test_local_llama.py",
        "tests/test_local_judge.py",
        "tests/benchmarks/test_token_faithfulness.py",
        "plugins/models/local_vllm/tests/test_ray_engines.py",  # llama-cpp-python's server as the engine
        "plugins/agents/token_preserving/tests/test_token_preserving.py::test_three_turns_with_local_llama_extend_the_previous_tokens_exactly",
        "plugins/agents/token_preserving/tests/test_token_preserving.py::test_a_rollout_with_local_llama_keeps_token_ids_on_every_generated_item",
        "plugins/models/openai_model/tests/test_openai_model.py::test_chat_completions",
        "plugins/models/openai_model/tests/test_openai_model.py::test_responses_converted_to_chat_completions",
        "plugins/models/openai_model/tests/test_openai_model.py::test_extra_body_is_merged_over_the_request",
        "plugins/models/openai_model/tests/test_openai_model.py::test_concurrent_requests_beyond_the_limit_all_succeed",
        "plugins/models/openai_model/tests/test_openai_model.py::test_wrong_api_key_is_a_clear_non_retryable_error",
    ),
    # Run programs in the bubblewrap sandbox.
    "sandbox": (
        "packages/gym-core/tests/test_sandbox.py",
        "tests/test_sandbox_failures.py",
        "tests/benchmarks/test_sandbox.py",
        "tests/benchmarks/test_repo.py",
        "plugins/resources/code_gen/tests",
        "packages/gym-cli/tests/test_example_rollouts.py::test_the_example_rollouts_are_current[code_gen]",
        "plugins/resources/repo/tests",
        "plugins/agents/mini_swe_agent/tests/test_mini_swe_agent.py",
        "packages/gym-cli/tests/test_example_rollouts.py::test_the_example_rollouts_are_current[repo]",
        # gym redteam over every first-party environment (code_gen's probes run programs): minutes.
        "packages/gym-cli/tests/test_redteam.py::test_every_first_party_environment_has_no_gameable_probe",
    ),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        default=False,
        help=f"run every test, the {', '.join(TIERS)} tiers too (what CI runs)",
    )


def tiers_of(nodeid: str) -> list[str]:
    """The tiers of the test with this node id (``path::name[params]``), from ``TIERS``."""
    path, _, name = nodeid.partition("::")
    return [tier for tier, entries in TIERS.items() if any(_holds(entry, path, name) for entry in entries)]


def _holds(entry: str, path: str, name: str) -> bool:
    where, _, which = entry.partition("::")
    if path != where and not path.startswith(where.rstrip("/") + "/"):
        return False
    if not which:
        return True
    if "[" in which:  # one parameter set
        return name == which
    return name.split("[", 1)[0] == which or name.startswith(which + "::")


def _fast_tier_only(config: pytest.Config) -> bool:
    """The default run: no --full, no -m, no paths named (pytest runs the configured testpaths)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # a pytest-xdist worker: its controller decided, from the command line
        return workerinput["gym_fast_tier_only"]
    return (
        not config.getoption("full")
        and not config.getoption("markexpr")
        and config.args_source is pytest.Config.ArgsSource.TESTPATHS
    )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # pytest-xdist, in the controller: what each worker is told
    node.workerinput["gym_fast_tier_only"] = _fast_tier_only(node.config)


# pytest-xdist processes for a run of the whole suite (`uv run pytest`, `uv run pytest --full`).
WORKERS = 2


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads -n
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A run of the whole suite (no paths named, no -n) runs on ``WORKERS`` pytest-xdist workers where
    there are as many CPUs; with any -n, each test file runs on one worker, so that its module-scoped
    servers and clusters start once."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    if (
        config.option.numprocesses is None
        and config.args_source is pytest.Config.ArgsSource.TESTPATHS
        and not config.option.collectonly
        and not config.option.usepdb
        and len(os.sched_getaffinity(0)) >= WORKERS
    ):
        config.option.numprocesses = WORKERS
    if config.option.numprocesses and config.option.dist == "no":
        config.option.dist = "loadfile"
        # Files in collection order, not most tests first: tests/ comes first (testpaths), so its longest
        # file (test_train_venv.py, a third of the full run, four tests) starts at once instead of last.
        config.option.loadscopereorder = False


_DESELECTED = pytest.StashKey[int]()


@pytest.hookimpl(tryfirst=True)  # before -m reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, deselected = [], []
    for item in items:
        tiers = tiers_of(item.nodeid)
        for tier in tiers:
            item.add_marker(tier)
        (deselected if tiers else kept).append(item)
    if deselected and _fast_tier_only(config):
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
        config.stash[_DESELECTED] = len(deselected)


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    deselected = config.stash.get(_DESELECTED, 0)
    if deselected:
        return (
            f"fast tier: {deselected} test{'' if deselected == 1 else 's'} of the {', '.join(TIERS)} tiers left out "
            "(--full runs every test; -m TIER one tier)"
        )
    return None


@pytest.fixture(scope="session")
def tier_paths() -> dict[str, tuple[str, ...]]:
    """``TIERS``: each tier's paths."""
    return TIERS


@pytest.fixture(scope="session", name="tiers_of")
def tiers_of_fixture() -> Callable[[str], list[str]]:
    """``tiers_of(nodeid)``: the tiers of a test."""
    return tiers_of


# --- signal handlers ---------------------------------------------------------------------------

# On SIGINT and SIGTERM the test process does what pytest does: stop. Code that a test runs in this
# process may install handlers of its own (a Ray node started by a fixture installs one for SIGTERM
# that drains the node and raises SystemExit wherever the signal lands, then swallows every later
# SIGTERM): the session's are put back after each test's setup, call and teardown, so that no test,
# fixture or module-scoped cluster leaves one behind.
GUARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_SESSION_HANDLERS: dict[signal.Signals, Any] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION_HANDLERS.update({signum: signal.getsignal(signum) for signum in GUARDED_SIGNALS})


def _restore_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # only the main thread may set handlers (and only it runs them)
    for signum, handler in _SESSION_HANDLERS.items():
        if signal.getsignal(signum) is not handler:
            signal.signal(signum, handler)


@pytest.fixture(scope="session")
def session_signal_handlers() -> dict[signal.Signals, Any]:
    """SIGINT's and SIGTERM's handlers when the session started: what every test runs with."""
    return dict(_SESSION_HANDLERS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        _restore_signal_handlers()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        _restore_signal_handlers()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        _restore_signal_handlers()
