"""Rows whose hidden tests are pytest tests (``test_runner: "pytest"``), over real HTTP in the real
sandbox: node ids (parametrized ones too) scored one by one, the reference fix 1.0, no fix 0, and
every way of faking pytest's verdict (a planted ``conftest.py``, deselection, ``_pytest``'s reports
patched, an exit with status 0, gym redteam's other probes) scored as an honest failure.

The rows are ``gym repo-tasks generate --runner pytest`` tasks (seed 0, ``data/example_pytest.jsonl``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gym_core.redteam import Target
from gym_core.testing import HTTPCaller, assistant_response, plugin_manager, read_rows, running_servers

import gym_repo.plugin
import gym_repo.redteam

PACKAGE = Path(__file__).resolve().parents[1]
ROWS = read_rows(PACKAGE / "data" / "example_pytest.jsonl")
# What a probe earns once the bug is fixed too: 1.0 where the driver leaves the attack inert (the
# planted files are never loaded), 0.0 where the attack breaks or tampers with the tests themselves.
INERT = {"repo_sitecustomize", "repo_forged_results", "repo_conftest_pass", "repo_conftest_deselect"}


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Any]]:
    config = {"repo": {"plugin": "repo", "reward": "fraction", "test_timeout_s": 10, "verify_timeout_s": 120}}
    with running_servers(config, plugin_manager(gym_repo.plugin)) as global_config:
        yield {"url": global_config.instances["repo"].url, "token": global_config.auth_token}


def seeded(servers: dict[str, Any], row: dict[str, Any]) -> HTTPCaller:
    caller = HTTPCaller(servers["url"], 180, auth_token=servers["token"])
    reply = caller.post("/seed_session", row)
    assert reply.status == 200, reply.json()
    return caller


def verify(caller: HTTPCaller, row: dict[str, Any]) -> dict[str, Any]:
    reply = caller.post("/verify", {**row, "response": assistant_response("done")})
    assert reply.status == 200, reply.json()
    return reply.json()


def test_the_rows_are_pytest_rows_with_parametrized_node_ids():
    for row in ROWS:
        assert row["test_runner"] == "pytest"
        assert all("::" in t and t.endswith("]") for t in row["tests_to_fix"] + row["tests_to_keep"])
        assert any("@pytest.mark.parametrize" in text for text in row["hidden_tests"].values())


def test_no_fix_scores_the_kept_tests_only_and_the_reference_fix_scores_1(servers):
    for row in ROWS:
        caller = seeded(servers, row)
        before = verify(caller, row)
        results = {r["test"]: r for r in before["test_results"]}
        assert set(results) == set(row["tests_to_fix"]) | set(row["tests_to_keep"])
        assert not any(results[t]["passed"] for t in row["tests_to_fix"]), results
        assert all(results[t]["passed"] for t in row["tests_to_keep"]), results
        assert before["fixed"] is False and before["kept"] is True
        assert before["reward"] == len(row["tests_to_keep"]) / len(results)
        assert "call failed" in results[row["tests_to_fix"][0]]["detail"]
        assert caller.post("/apply_patch", {"patch": row["reference_patch"]}).status == 200
        after = verify(caller, row)
        assert after["reward"] == 1.0 and after["fixed"] and after["kept"], after


def test_fixtures_of_a_hidden_conftest_run_and_skips_xfails_and_unknown_ids_fail(servers):
    tests = {
        "tests/conftest.py": "import pytest\n\n@pytest.fixture\ndef two():\n    return 2\n",
        "tests/test_lib.py": (
            "import pytest\nfrom lib import value\n\n"
            "@pytest.mark.parametrize('n', [1, 2])\ndef test_value(two, n):\n    assert value() * n == two * n\n\n"
            "def test_skipped():\n    pytest.skip('not now')\n\n"
            "@pytest.mark.xfail(reason='known')\ndef test_xfail():\n    assert value() == 3\n\n"
            "def test_exit():\n    import sys\n    sys.exit(0)\n"
        ),
    }
    ids = ["tests/test_lib.py::test_value[1]", "tests/test_lib.py::test_value[2]"]
    others = ["tests/test_lib.py::test_skipped", "tests/test_lib.py::test_xfail", "tests/test_lib.py::test_exit"]
    row = {
        **ROWS[0],
        "repository": {"lib.py": "def value():\n    return 2\n"},
        "hidden_tests": tests,
        "tests_to_fix": ids,
        "tests_to_keep": [*others, "tests/test_lib.py::test_nope", "tests/test_lib.py"],
    }
    caller = seeded(servers, row)
    results = {r["test"]: r for r in verify(caller, row)["test_results"]}
    assert all(results[t]["passed"] for t in ids), results
    assert "skipped" in results["tests/test_lib.py::test_skipped"]["detail"], results
    assert "xfail" in results["tests/test_lib.py::test_xfail"]["detail"], results
    assert "SystemExit" in results["tests/test_lib.py::test_exit"]["detail"], results
    assert "collected nothing" in results["tests/test_lib.py::test_nope"]["detail"], results
    whole = results["tests/test_lib.py"]  # a file holds several tests: not one test id
    assert whole["passed"] is False and "not that one test" in whole["detail"], results


def test_a_hidden_test_that_hangs_fails_alone(servers):
    tests = {
        "test_lib.py": (
            "from lib import value\n\ndef test_a_hang():\n    value(True)\n\n"
            "def test_b_value():\n    assert value(False) == 2\n"
        )
    }
    hang = "import os, time\ndef value(hang):\n    if hang:\n        os.fork()\n        time.sleep(60)\n    return 2\n"
    row = {
        **ROWS[0],
        "repository": {"lib.py": hang},
        "hidden_tests": tests,
        "tests_to_fix": ["test_lib.py::test_a_hang"],
        "tests_to_keep": ["test_lib.py::test_b_value"],
    }
    caller = seeded(servers, row)
    results = {r["test"]: r for r in verify(caller, row)["test_results"]}
    assert results["test_lib.py::test_a_hang"]["detail"] == "timed out after 10 s", results
    assert results["test_lib.py::test_b_value"]["passed"] is True, results


def test_a_test_cannot_change_what_the_next_one_runs(servers):
    # The first test's code plants a conftest.py that reports passes and empties the hidden test file;
    # the driver puts the hidden files back and drops the conftest before the next test.
    tests = {"tests/test_lib.py": "from lib import value\n\ndef test_a():\n    assert value() == 1\n\n"
             "def test_b():\n    assert value() == 1\n"}  # fmt: skip
    lib = (
        "import os\n"
        "open('/tmp/work/conftest.py', 'w').write("
        + repr(gym_repo.redteam.CONFTEST_PASS)
        + ")\nopen('/tmp/work/tests/test_lib.py', 'w').write('def test_a():\\n    pass\\ndef test_b():\\n    pass\\n')\n"
        "def value():\n    return 2\n"
    )
    row = {
        **ROWS[0],
        "repository": {"lib.py": lib},
        "hidden_tests": tests,
        "tests_to_fix": ["tests/test_lib.py::test_a", "tests/test_lib.py::test_b"],
        "tests_to_keep": [],
    }
    caller = seeded(servers, row)
    verdict = verify(caller, row)
    assert verdict["reward"] == 0.0, verdict


def test_bad_runner_and_option_like_test_ids_are_a_422(servers):
    caller = seeded(servers, ROWS[0])
    reply = caller.post("/verify", {**ROWS[0], "test_runner": "nose", "response": {"output": []}})
    assert reply.status == 422 and "test_runner" in reply.json()["error"]["message"], reply.json()
    reply = caller.post("/verify", {**ROWS[0], "tests_to_keep": ["-p evil"], "response": {"output": []}})
    assert reply.status == 422 and "-p evil" in reply.json()["error"]["message"], reply.json()


@pytest.mark.parametrize("probe", gym_repo.redteam.PROBES, ids=lambda p: p.name)
def test_code_that_fakes_the_pytest_verdict_earns_nothing(servers, probe):
    row = ROWS[0]
    caller = seeded(servers, row)
    attack = probe.build(Target(environment="repo", row=row))
    assert attack is not None
    for call in attack.turns[0]["tool_calls"]:
        assert caller.post(f"/{call['name']}", call["arguments"]).status == 200
    verdict = verify(caller, row)
    fixed_tests = {r["test"]: r["passed"] for r in verdict["test_results"] if r["test"] in row["tests_to_fix"]}
    assert not any(fixed_tests.values()) and verdict["fixed"] is False, verdict
    # With the bug fixed as well: the honest tests decide where the attack is inert, else nothing passes.
    assert caller.post("/apply_patch", {"patch": row["reference_patch"]}).status == 200
    fixed = verify(caller, row)
    assert fixed["reward"] == (1.0 if probe.name in INERT else 0.0), fixed


def test_all_pass_reward_with_a_sandbox_per_verification():
    # reward all_pass (the default) and sandbox_pool off: no fix 0, the reference fix 1.
    config = {"repo": {"plugin": "repo", "sandbox_pool": False, "verify_timeout_s": 120}}
    with running_servers(config, plugin_manager(gym_repo.plugin)) as global_config:
        caller = HTTPCaller(global_config.instances["repo"].url, 180, auth_token=global_config.auth_token)
        row = ROWS[1]
        assert caller.post("/seed_session", row).status == 200
        assert verify(caller, row)["reward"] == 0.0
        assert caller.post("/apply_patch", {"patch": row["reference_patch"]}).status == 200
        assert verify(caller, row)["reward"] == 1.0
