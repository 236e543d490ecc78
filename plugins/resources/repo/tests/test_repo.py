"""The repo environment over real HTTP, every command in the real sandbox: gym's conformance kit,
then the tools, the path confinement, the limits, the hidden tests and the reward.

The example rows are generated tasks (``gym repo-tasks generate``, seed 0); each carries its
reference fix (``reference_patch``).
"""

from __future__ import annotations

import importlib.util
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gym_core.redteam import Target
from gym_core.testing import ResourcesServerTests, RunningServers, assistant_response, read_rows

import gym_repo.plugin
import gym_repo.redteam

PACKAGE = Path(__file__).resolve().parents[1]
ROWS = read_rows(PACKAGE / "data" / "example.jsonl")


def sandbox_escapes() -> dict[str, str]:
    """The sandbox's own escape suite (gym-core's tests), to run through the tools; empty where gym-core's
    tests are not beside this package (its published sdist)."""
    path = PACKAGE.parents[2] / "packages" / "gym-core" / "tests" / "test_sandbox.py"
    if not path.is_file():
        return {}
    spec = importlib.util.spec_from_file_location("gym_core_sandbox_escapes", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.ESCAPES)


ESCAPES = sandbox_escapes()


@pytest.fixture()
def host_listener() -> Iterator[int]:
    """A TCP server on the host's loopback: a command must not reach it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def verify(caller, row: dict[str, Any]) -> dict[str, Any]:
    reply = caller.post("/verify", {**row, "response": assistant_response("done")})
    assert reply.status == 200, reply.json()
    return reply.json()


class TestRepo(ResourcesServerTests):
    server_type = "repo"
    plugins = [gym_repo.plugin]
    options = {
        "command_timeout_s": 4,
        "output_bytes": 1024,
        "workspace_mb": 4,
        "memory_mb": 256,
        "processes": 16,
        "test_timeout_s": 2,
    }
    example_data = PACKAGE / "data" / "example.jsonl"

    def tool_arguments(self, tool):
        return {
            "run_command": {"command": "ls"},
            "read_file": {"path": "README.md"},
            "write_file": {"path": "notes.txt", "content": "hello"},
            "list_files": {},
            "apply_patch": {"patch": "--- a/new.txt\n+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n"},
        }[tool["name"]]

    def seeded(self, servers: RunningServers, row: dict[str, Any] | None = None):
        caller = servers.caller()
        reply = caller.post("/seed_session", row or ROWS[0])
        assert reply.status == 200, reply.json()
        return caller

    # --- the tools ------------------------------------------------------------------------------

    def test_run_keeps_its_files_for_the_next_calls_and_reports_exit_code_and_output(self, gym_servers):
        caller = self.seeded(gym_servers)
        first = caller.post(
            "/run_command", {"command": "echo made > made.txt; mkdir -p d/e; echo oops >&2; exit 3"}
        ).json()
        assert first == {"exit_code": 3, "stdout": "", "stderr": "oops\n"}
        second = caller.post("/run_command", {"command": "cat made.txt; pwd; python -c 'print(6 * 7)'"}).json()
        assert second["exit_code"] == 0 and second["stdout"] == "made\n/tmp/work\n42\n"
        assert caller.post("/read_file", {"path": "made.txt"}).json()["content"] == "made\n"
        listing = caller.post("/list_files", {"path": ".", "recursive": False}).json()["files"]
        assert "made.txt" in listing and "d/" in listing and "README.md" in listing
        assert "tests/" not in listing  # the hidden tests are not in the workspace
        # Another session sees its own workspace, not this one's.
        other = self.seeded(gym_servers)
        assert other.post("/read_file", {"path": "made.txt"}).status == 400

    def test_links_empty_directories_and_executable_bits_outlive_their_command(self, gym_servers):
        # The prelude places them in batches (one mkdir, one chmod) from the next command on.
        caller = self.seeded(gym_servers)
        make = (
            "mkdir -p 'empty dir' a/b/c x; printf 'echo ran $1' > 'run me.sh'; chmod +x 'run me.sh'; "
            "ln -s ../README.md x/readme; ln -s 'run me.sh' go; printf 'echo two' > two.sh; chmod +x two.sh"
        )
        assert caller.post("/run_command", {"command": make}).json()["exit_code"] == 0
        check = (
            "./go 1; ./two.sh; ls -d 'empty dir' a/b/c; head -c 8 x/readme; echo; command -v python3; command -v python"
        )
        seen = caller.post("/run_command", {"command": check}).json()
        assert seen["exit_code"] == 0, seen
        lines = seen["stdout"].splitlines()
        assert lines[:5] == ["ran 1", "two", "a/b/c", "empty dir", ROWS[0]["repository"]["README.md"][:8]], seen
        assert lines[5:] == ["/tmp/.gym/bin/python3", "/tmp/.gym/bin/python"], seen

    def test_a_file_left_unreadable_is_dropped_and_the_command_still_answers(self, gym_servers):
        caller = self.seeded(gym_servers)
        out = caller.post("/run_command", {"command": "echo x > locked.txt; chmod 000 locked.txt; echo done"})
        assert out.status == 200 and out.json() == {"exit_code": 0, "stdout": "done\n", "stderr": ""}
        assert caller.post("/read_file", {"path": "locked.txt"}).status == 400
        assert caller.post("/read_file", {"path": "README.md"}).status == 200

    def test_write_then_run_and_list(self, gym_servers):
        caller = self.seeded(gym_servers)
        assert caller.post("/write_file", {"path": "pkg2/mod.py", "content": "X = 5\n"}).json()["bytes"] == 6
        out = caller.post("/run_command", {"command": "python -c 'import pkg2.mod as m; print(m.X)'"}).json()
        assert out["stdout"] == "5\n"
        assert caller.post("/list_files", {"path": "pkg2"}).json()["files"] == ["mod.py"]

    def test_a_long_listing_says_how_many_names_it_left_out(self, gym_servers):
        caller = self.seeded(gym_servers)
        assert (
            caller.post("/run_command", {"command": "mkdir many; cd many; seq 1 1100 | xargs touch"}).json()[
                "exit_code"
            ]
            == 0
        )
        listing = caller.post("/list_files", {"path": "many"}).json()
        assert len(listing["files"]) == 1000 and listing["more"] == 100

    def test_output_is_truncated_with_a_marker(self, gym_servers):
        caller = self.seeded(gym_servers)
        out = caller.post("/run_command", {"command": "python -c 'print(\"x\" * 5000)'"}).json()
        assert out["stdout"].startswith("x" * 1024)
        assert "[... output truncated: 3977 more bytes ...]" in out["stdout"]

    def test_apply_patch_applies_all_or_nothing(self, gym_servers):
        row = ROWS[0]
        caller = self.seeded(gym_servers, row)
        path = row["mutation"]["path"]
        before = caller.post("/read_file", {"path": path}).json()["content"]
        bad = row["reference_patch"] + "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-no such line\n+x\n"
        refused = caller.post("/apply_patch", {"patch": bad})
        assert refused.status == 400 and "does not apply" in refused.json()["error"]["message"]
        assert caller.post("/read_file", {"path": path}).json()["content"] == before
        assert caller.post("/apply_patch", {"patch": row["reference_patch"]}).json()["applied"] is True
        after = caller.post("/read_file", {"path": path}).json()["content"]
        added = [line[1:] for line in row["reference_patch"].splitlines() if line.startswith("+") and line[1:2] != "+"]
        assert after != before and added and all(line in after.splitlines() for line in added)

    # --- confinement ------------------------------------------------------------------------------

    def test_paths_outside_the_workspace_are_refused_with_a_tool_error(self, gym_servers):
        caller = self.seeded(gym_servers)
        made = caller.post(
            "/run_command", {"command": "ln -s /etc/passwd leak; ln -s ../.. up; ln -s README.md ok"}
        ).json()
        assert made["exit_code"] == 0
        for route, body in [
            ("/read_file", {"path": "../x"}),
            ("/read_file", {"path": "/etc/passwd"}),
            ("/read_file", {"path": "leak"}),
            ("/read_file", {"path": "up/etc/passwd"}),
            ("/write_file", {"path": "../../evil.py", "content": "x"}),
            ("/write_file", {"path": "leak", "content": "x"}),
            ("/write_file", {"path": "up/evil.py", "content": "x"}),
            ("/list_files", {"path": "/"}),
            ("/list_files", {"path": "up"}),
        ]:
            reply = caller.post(route, body)
            assert reply.status == 400, (route, body, reply.json())
            assert reply.json()["error"]["type"] == "tool_error"
            assert "workspace" in reply.json()["error"]["message"] or "absolute" in reply.json()["error"]["message"]
        # A link that stays inside is followed.
        assert caller.post("/read_file", {"path": "ok"}).json()["content"].startswith("# ")
        assert not Path("/evil.py").exists()

    def test_the_hidden_tests_are_not_reachable_by_the_model(self, gym_servers):
        row = ROWS[0]
        caller = self.seeded(gym_servers, row)
        names = " -o ".join(f"-path '*/{name}'" for name in row["hidden_tests"] if Path(name).name.startswith("test_"))
        found = caller.post(
            "/run_command", {"command": f"find / \\( {names} \\) 2>/dev/null; grep -rl TestCa''se /tmp"}
        ).json()
        assert found["stdout"] == ""
        assert caller.post("/read_file", {"path": next(iter(row["hidden_tests"]))}).status == 400

    # --- limits -----------------------------------------------------------------------------------

    def test_a_command_past_its_time_is_stopped_and_the_session_goes_on(self, gym_servers):
        caller = self.seeded(gym_servers)
        slow = caller.post("/run_command", {"command": "echo before; sleep 60"}).json()
        assert slow["timed_out"] is True and slow["exit_code"] == 124 and slow["stdout"] == "before\n"
        assert caller.post("/run_command", {"command": "echo after"}).json()["stdout"] == "after\n"

    def test_hostile_commands_fail_and_leave_nothing_behind(self, gym_servers):
        caller = self.seeded(gym_servers)
        # A fork bomb: the process limit stops it; the command fails or is stopped, the server stays.
        bomb = caller.post("/run_command", {"command": "b() { b | b & }; b; sleep 2; echo end"})
        assert bomb.status in (200, 400)
        # Memory: the address-space limit.
        memory = caller.post("/run_command", {"command": "python -c 'x = bytearray(1 << 30)'"}).json()
        assert memory["exit_code"] != 0 and "MemoryError" in memory["stderr"]
        # Disk: the workspace's cap; the workspace stays as it was.
        disk = caller.post("/run_command", {"command": "head -c 100000000 /dev/zero > big.bin"})
        assert disk.status == 400 or disk.json()["exit_code"] != 0
        assert caller.post("/read_file", {"path": "big.bin"}).status == 400 or disk.status == 200
        # A process left running in the background does not survive its command.
        caller.post("/run_command", {"command": "(sleep 300 &) ; echo started"})
        left = caller.post("/run_command", {"command": "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"}).json()
        assert "sleep" not in left["stdout"] and "cat" in left["stdout"]
        # The network is out of reach.
        net = caller.post(
            "/run_command", {"command": "python -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), 3)'"}
        )
        assert net.json()["exit_code"] != 0
        assert caller.post("/run_command", {"command": "echo alive"}).json()["stdout"] == "alive\n"

    @pytest.mark.parametrize("name", sorted(ESCAPES))
    def test_the_sandbox_escape_suite_through_the_tools(self, gym_servers, host_listener, name):
        hostname = socket.gethostname()
        caller = self.seeded(gym_servers)
        assert caller.post("/write_file", {"path": "hostile.py", "content": ESCAPES[name]}).status == 200
        reply = caller.post("/run_command", {"command": f"python hostile.py {host_listener} {os.getpid()}"})
        assert reply.status in (200, 400), reply.json()  # ran and failed, or stopped by a limit (a tool error)
        assert "ESCAPED" not in reply.json().get("stdout", ""), f"{name} escaped: {reply.json()}"
        assert socket.gethostname() == hostname and not Path("/usr/escaped").exists()
        # The session goes on, and the reward is still the hidden tests' verdict.
        assert caller.post("/run_command", {"command": "echo alive"}).json()["stdout"] == "alive\n"
        assert verify(caller, ROWS[0])["reward"] == 0.0

    @pytest.mark.parametrize("name", sorted(ESCAPES))
    def test_the_sandbox_escape_suite_through_verify(self, gym_servers, host_listener, name):
        # /verify runs as a job of the same pool as commands: the code under test (here the hidden test
        # runs the escape program) is held as a command is.
        hostname = socket.gethostname()
        test = (
            "import subprocess, sys, unittest\n"
            "class T(unittest.TestCase):\n"
            "    def test_contained(self):\n"
            f"        argv = [sys.executable, 'hostile.py', '{host_listener}', '{os.getpid()}']\n"
            "        try:\n"
            "            out = subprocess.run(argv, capture_output=True, timeout=1.5).stdout\n"
            "        except subprocess.TimeoutExpired as exc:\n"
            "            out = exc.stdout or b''\n"
            "        self.assertNotIn(b'ESCAPED', out, out)\n"
        )
        row = {
            **ROWS[0],
            "repository": {"hostile.py": ESCAPES[name]},
            "hidden_tests": {"test_escape.py": test},
            "tests_to_fix": ["test_escape.T.test_contained"],
            "tests_to_keep": [],
        }
        caller = self.seeded(gym_servers, row)
        reply = caller.post("/verify", {**row, "response": assistant_response("done")})
        assert reply.status == 200, reply.json()
        assert "ESCAPED" not in reply.json()["test_results"][0]["detail"], f"{name} escaped: {reply.json()}"
        assert socket.gethostname() == hostname and not Path("/usr/escaped").exists()
        assert caller.post("/run_command", {"command": "echo alive"}).json()["stdout"] == "alive\n"

    def test_nothing_of_one_command_reaches_the_next_outside_the_workspace(self, gym_servers):
        # Commands run in pooled workers (sandbox_pool, the default): each job's scratch, /dev/shm and
        # processes are cleaned, so neither the next command nor another session finds what one left.
        first = self.seeded(gym_servers)
        plant = "echo secret > /tmp/left.txt; echo secret > /dev/shm/left.txt; mkdir -p /tmp/.gym/x; echo ok"
        assert first.post("/run_command", {"command": plant}).json()["stdout"] == "ok\n"
        look = "ls -a /tmp /dev/shm /tmp/.gym; cat /tmp/left.txt /dev/shm/left.txt; cat /tmp/work/*.txt"
        for caller in (first, self.seeded(gym_servers)):
            seen = caller.post("/run_command", {"command": look}).json()
            assert "left.txt" not in seen["stdout"] and "secret" not in seen["stdout"] + seen["stderr"], seen
            assert "x\n" not in seen["stdout"].split("/tmp/.gym:")[1], seen

    def test_a_closed_session_has_no_workspace(self, gym_servers):
        caller = self.seeded(gym_servers)
        caller.post("/write_file", {"path": "mine.txt", "content": "x"})
        assert caller.post("/close_session", {}).json() == {"closed": True}
        gone = caller.post("/read_file", {"path": "mine.txt"})
        assert gone.status == 409 and gone.json()["error"]["type"] == "session_expired"

    # --- the verdict --------------------------------------------------------------------------------

    def test_verify_scores_the_fix_and_reports_each_test(self, gym_servers):
        row = ROWS[0]
        caller = self.seeded(gym_servers, row)
        before = verify(caller, row)
        assert before["reward"] == 0.0 and before["fixed"] is False and before["kept"] is True
        results = {r["test"]: r["passed"] for r in before["test_results"]}
        assert set(results) == set(row["tests_to_fix"]) | set(row["tests_to_keep"])
        assert not any(results[t] for t in row["tests_to_fix"]) and all(results[t] for t in row["tests_to_keep"])
        assert caller.post("/apply_patch", {"patch": row["reference_patch"]}).status == 200
        after = verify(caller, row)
        assert after["reward"] == 1.0 and after["fixed"] and after["kept"]
        assert after["tests_passed"] == after["tests_total"] == len(results)

    def test_hidden_tests_run_with_their_fixtures_and_a_skip_fails(self, gym_servers):
        # Each test runs on its own as unittest runs it: setUpModule and setUpClass first; a skip is no pass.
        tests = (
            "import unittest\nfrom lib import value\nSTATE = []\n"
            "def setUpModule():\n    STATE.append('module')\n"
            "class T(unittest.TestCase):\n"
            "    @classmethod\n    def setUpClass(cls):\n        cls.ready = 'class'\n"
            "    def test_fixtures(self):\n        self.assertEqual((STATE, self.ready, value()), (['module'], 'class', 2))\n"
            "    @unittest.skip('not now')\n    def test_skipped(self):\n        pass\n"
        )
        row = {
            **ROWS[0],
            "repository": {"lib.py": "def value():\n    return 2\n"},
            "hidden_tests": {"test_lib.py": tests},
            "tests_to_fix": ["test_lib.T.test_fixtures"],
            "tests_to_keep": ["test_lib.T.test_skipped"],
        }
        caller = self.seeded(gym_servers, row)
        results = {r["test"]: r for r in verify(caller, row)["test_results"]}
        assert results["test_lib.T.test_fixtures"]["passed"] is True, results
        skipped = results["test_lib.T.test_skipped"]
        assert skipped["passed"] is False and "skipped" in skipped["detail"], results

    def test_a_hidden_test_that_hangs_fails_alone(self, gym_servers):
        # Each test has test_timeout_s (here 2 s); the tests after a hanging one still run.
        tests = (
            "import unittest\nfrom lib import value\n"
            "class T(unittest.TestCase):\n"
            "    def test_a_hang(self):\n        value(True)\n"
            "    def test_b_value(self):\n        self.assertEqual(value(False), 2)\n"
        )
        hang = (
            "import os, time\ndef value(hang):\n    if hang:\n        os.fork()\n        time.sleep(60)\n    return 2\n"
        )
        row = {
            **ROWS[0],
            "repository": {"lib.py": hang},
            "hidden_tests": {"test_lib.py": tests},
            "tests_to_fix": ["test_lib.T.test_a_hang"],
            "tests_to_keep": ["test_lib.T.test_b_value"],
        }
        caller = self.seeded(gym_servers, row)
        results = {r["test"]: r for r in verify(caller, row)["test_results"]}
        assert results["test_lib.T.test_a_hang"]["detail"] == "timed out after 2 s", results
        assert results["test_lib.T.test_b_value"]["passed"] is True, results

    def test_a_test_cannot_change_what_the_next_one_runs(self, gym_servers):
        # The code under test rewrites the hidden test file when the first test imports it: the driver puts
        # the hidden files back before each test, so the second one still runs the real test.
        tests = (
            "import unittest\nfrom lib import value\nclass T(unittest.TestCase):\n"
            "    def test_a(self):\n        self.assertEqual(value(), 1)\n"
            "    def test_b(self):\n        self.assertEqual(value(), 1)\n"
        )
        fake = (
            "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n    test_b = test_a\n"
        )
        lib = f"open('/tmp/work/test_lib.py', 'w').write({fake!r})\ndef value():\n    return 2\n"
        row = {
            **ROWS[0],
            "repository": {"lib.py": lib},
            "hidden_tests": {"test_lib.py": tests},
            "tests_to_fix": ["test_lib.T.test_a", "test_lib.T.test_b"],
            "tests_to_keep": [],
        }
        caller = self.seeded(gym_servers, row)
        verdict = verify(caller, row)
        assert verdict["tests_passed"] == 0, verdict

    def test_bad_rows_are_a_422_naming_the_field(self, gym_servers):
        caller = gym_servers.caller()
        for repository in ["/no/such/dir", {"../escape.py": "x"}]:
            reply = caller.post("/seed_session", {**ROWS[0], "repository": repository})
            assert reply.status == 422 and "repository" in reply.json()["error"]["message"], reply.json()
        missing = {k: v for k, v in ROWS[0].items() if k != "repository"}
        assert caller.post("/seed_session", missing).status == 422
        caller = self.seeded(gym_servers)
        reply = caller.post("/verify", {**ROWS[0], "hidden_tests": {"/abs.py": "x"}, "response": {"output": []}})
        assert reply.status == 422 and "hidden_tests" in reply.json()["error"]["message"]
        reply = caller.post("/verify", {**ROWS[0], "tests_to_fix": [], "tests_to_keep": [], "response": {"output": []}})
        assert reply.status == 422 and "no test" in reply.json()["error"]["message"]
        # A test id the hidden tests do not have fails, saying why.
        verdict = verify(caller, {**ROWS[0], "tests_to_fix": ["tests.nope.T.test"], "tests_to_keep": []})
        assert verdict["reward"] == 0.0 and "nope" in verdict["test_results"][0]["detail"]

    def test_rewriting_the_tests_or_shadowing_unittest_earns_nothing(self, gym_servers):
        row = ROWS[0]
        caller = self.seeded(gym_servers, row)
        fake_pass = "import unittest\nclass TestCase:\n    pass\ndef main():\n    pass\n"
        for path in ["unittest.py", "unittest/__init__.py"]:
            caller.post("/write_file", {"path": path, "content": fake_pass})
        for test_file in row["hidden_tests"]:
            caller.post("/write_file", {"path": test_file, "content": ""})
        assert verify(caller, row)["reward"] == 0.0

    @pytest.mark.parametrize("probe", gym_repo.redteam.PROBES, ids=lambda p: p.name)
    def test_code_that_fakes_the_hidden_tests_verdict_earns_nothing(self, gym_servers, probe):
        # gym redteam's probes of this environment (each scored 1 before the driver forked per test
        # under -I -S, checked unittest and builtins, counted skips as failures and hid its nonce).
        row = ROWS[0]
        caller = self.seeded(gym_servers, row)
        attack = probe.build(Target(environment="repo", row=row))
        assert attack is not None
        for call in attack.turns[0]["tool_calls"]:
            assert caller.post(f"/{call['name']}", call["arguments"]).status == 200
        verdict = verify(caller, row)
        assert verdict["reward"] == 0.0 and verdict["tests_passed"] < verdict["tests_total"], verdict
        # With the bug fixed as well, the honest tests pass unless the framework was tampered with.
        assert caller.post("/apply_patch", {"patch": row["reference_patch"]}).status == 200
        fixed = verify(caller, row)
        inert = {"repo_sitecustomize", "repo_forged_results", "repo_conftest_pass", "repo_conftest_deselect"}
        inert.add("repo_patch_pytest_reports")  # no _pytest in a unittest run: the import fails, quietly
        if probe.name in inert:  # the fix alone decides
            assert fixed["reward"] == 1.0, fixed
        else:
            assert fixed["reward"] == 0.0, fixed
            details = " ".join(r["detail"] for r in fixed["test_results"])
            reasons = ("changed the test framework", "skipped", "sent no verdict", "SystemExit")
            assert any(reason in details for reason in reasons), fixed


class TestFractionRewardAndSessionBudget:
    """Options: reward `fraction`; a session's command time, spent, refuses more commands (a tool error)."""

    def test_fraction_reward_and_the_session_budget(self):
        from gym_core.testing import HTTPCaller, plugin_manager, running_servers

        # Also the sandbox-per-command mode (sandbox_pool off).
        config = {
            "repo": {"plugin": "repo", "reward": "fraction", "session_command_time_s": 1.5, "sandbox_pool": False}
        }
        with running_servers(config, plugin_manager(gym_repo.plugin)) as global_config:
            url = global_config.instances["repo"].url
            caller = HTTPCaller(url, 60, auth_token=global_config.auth_token)
            row = ROWS[0]
            assert caller.post("/seed_session", row).status == 200
            verdict = verify(caller, row)
            total = len(row["tests_to_fix"]) + len(row["tests_to_keep"])
            assert verdict["reward"] == len(row["tests_to_keep"]) / total and 0 < verdict["reward"] < 1
            slow = caller.post("/run_command", {"command": "sleep 5"}).json()  # cut at what is left: 1.5 s
            assert slow["timed_out"] is True
            spent = caller.post("/run_command", {"command": "echo more"})
            assert spent.status == 400 and "spent its command time" in spent.json()["error"]["message"]
            # Files still work, and so does verify.
            assert caller.post("/apply_patch", {"patch": row["reference_patch"]}).status == 400
            assert caller.post("/read_file", {"path": "README.md"}).status == 200
