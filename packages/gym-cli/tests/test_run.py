"""gym run as a user runs it: a real process, real servers, Ctrl+C, failure paths."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from gym_core.auth import token_for_head
from gym_core.config import free_port, port_is_free
from gym_core.testing import wait_until

ROOT = Path(__file__).resolve().parents[3]
COUNTER_SCRIPTED = ROOT / "plugins/resources/counter/configs/counter_scripted.yaml"
COUNTER_TASKS = ROOT / "plugins/resources/counter/data/example.jsonl"


def server_pids(marker: str) -> list[int]:
    """PIDs of server processes whose environment carries this run's marker."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ and b"gym_core.serve" in cmdline:
            pids.append(int(entry.name))
    return pids


def run_until_ready_then_sigint(gym, args: list[str], env: dict, timeout_s: float) -> tuple[list[str], str]:
    marker = env["GYM_TEST_MARKER"]
    proc = gym.start("run", *args, env=env)
    try:
        lines = proc.read_until("All servers ready", timeout_s)
        assert len(server_pids(marker)) == 3
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, "".join(lines) + rest
    return lines, rest


@pytest.mark.parametrize("isolation", ["none", "venv"])
def test_run_ready_then_ctrl_c_leaves_nothing_behind(tmp_path, isolation, gym):
    head_port = free_port()
    env = {"GYM_HOME": str(tmp_path / "home"), "GYM_TEST_MARKER": f"marker-{tmp_path.name}"}
    args = [str(COUNTER_SCRIPTED), "--isolation", isolation, f"head_server.port={head_port}"]
    lines, rest = run_until_ready_then_sigint(gym, args, env, timeout_s=300)
    text = "".join(lines)
    for name in ("counter", "policy_model", "counter_agent"):
        assert name in text
    assert "all servers stopped" in rest
    time.sleep(0.5)
    assert server_pids(env["GYM_TEST_MARKER"]) == []
    assert port_is_free(head_port)
    # The start-up step by step (plain: the output is piped), then the table.
    servers = ["start-up: starting 3 servers", "ready (3/3)", "start-up: all 3 servers ready", "gym servers"]
    if isolation == "venv":
        assert "built venv for counter" in text
        venvs = ["venv of counter: checking", "building the venv of counter", "venv of counter built", "(3/3 ready)"]
        assert_in_order(text, [f"start-up: {step}" for step in venvs[:3]] + [venvs[3], *servers])
        # The second run reuses the three venvs: no build.
        lines, _ = run_until_ready_then_sigint(gym, args, env, timeout_s=120)
        text = "".join(lines)
        assert "reused venv for counter" in text and "built venv" not in text
        assert_in_order(text, ["start-up: venv of counter reused", "(3/3 ready)", *servers])
        assert "start-up: building" not in text
    else:
        assert "start-up: venv" not in text
        assert_in_order(text, servers)


def assert_in_order(text: str, steps: list[str]) -> None:
    at = [text.index(step) for step in steps]
    assert at == sorted(at), text


def test_sigterm_also_stops_cleanly(tmp_path, gym):
    env = {"GYM_TEST_MARKER": f"marker-{tmp_path.name}"}
    proc = gym.start("run", str(COUNTER_SCRIPTED), "--isolation", "none", "head_server.port=0", env=env)
    try:
        proc.read_until("All servers ready", 120)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0
    time.sleep(0.5)
    assert server_pids(env["GYM_TEST_MARKER"]) == []


def test_child_crash_during_start_up_fails_with_its_last_lines(tmp_path, gym):
    config = tmp_path / "broken.yaml"
    config.write_text("policy:\n  plugin: local_llama\n  model_path: /nonexistent/model.gguf\n")
    proc = gym.start("run", str(config), "--isolation", "none", "head_server.port=0")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out  # a server failed (not a usage error: the config is valid)
    assert "server 'policy' exited" in out and "while starting" in out and "/nonexistent/model.gguf" in out


def run_fails(gym, *args: str, code: int = 2) -> str:
    """The output of a `gym run` that exits with ``code`` (2: bad usage, config or input)."""
    proc = gym.start("run", *args)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == code, out
    return out


def test_config_file_not_found(gym):
    out = run_fails(gym, "nope.yaml", "--isolation", "none")
    assert "config file not found: nope.yaml" in out


def test_unknown_plugin_did_you_mean(tmp_path, gym):
    config = tmp_path / "c.yaml"
    config.write_text("env:\n  plugin: countr\n")
    out = run_fails(gym, str(config), "--isolation", "none", "head_server.port=0")
    assert "unknown server type 'countr'" in out and "did you mean 'counter'" in out


def test_head_port_in_use(tmp_path, gym):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        out = run_fails(gym, str(COUNTER_SCRIPTED), "--isolation", "none", f"head_server.port={port}")
    assert f"port {port}" in out and "in use" in out and "head_server.port=0" in out  # a fix that works as typed


def test_status_without_servers(gym):
    proc = gym.run("status", "--head", f"http://127.0.0.1:{free_port()}", timeout_s=60)
    assert proc.returncode == 1
    assert "no gym servers are running" in proc.stderr


def test_status_lists_running_servers(tmp_path, gym):
    head_port = free_port()
    proc = gym.start("run", str(COUNTER_SCRIPTED), "--isolation", "none", f"head_server.port={head_port}")
    try:
        proc.read_until("All servers ready", 120)
        status = gym.run("status", "--head", f"http://127.0.0.1:{head_port}", "--json", timeout_s=60)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert status.returncode == 0, status.stderr
    rows = {row["name"]: row for row in json.loads(status.stdout)}
    assert set(rows) == {"counter", "policy_model", "counter_agent"}
    assert all(row["health"] == "ok" for row in rows.values())
    assert rows["counter"]["kind"] == "resources"


def server_instances(head_port: int) -> list[dict] | None:
    """``GET /server_instances`` of the head server, None once it no longer answers."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    head = f"http://127.0.0.1:{head_port}"
    request = urllib.request.Request(
        head + "/server_instances", headers={"Authorization": f"Bearer {token_for_head(head)}"}
    )
    try:
        with opener.open(request, timeout=10) as response:
            return json.loads(response.read())
    except OSError:
        return None


def test_a_server_dying_after_start_up_is_reported_however_often_it_is_listed(gym):
    """Listing the servers (what `gym status` does) must not consume the crash report:
    `gym run` still reports the crash and exits 1, and every listing says the server is dead."""
    head_port = free_port()
    proc = gym.start(
        "run",
        str(COUNTER_SCRIPTED),
        "--isolation",
        "none",
        f"head_server.port={head_port}",
        "++server_restarts.attempts=0",
    )  # no restarts: the first death stops gym run
    try:
        proc.read_until("All servers ready", 120)
        before = {row["name"]: row for row in server_instances(head_port)}
        assert before["counter"]["alive"] is True and before["counter"]["exit_code"] is None
        pid = before["counter"]["pid"]
        os.kill(pid, signal.SIGKILL)
        # The kernel reports the exit once every thread of the process is gone: until then a listing
        # may still say alive. From the first listing that says dead on, every listing must.
        listings = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(listings) < 5:
            rows = server_instances(head_port)
            if rows is None:
                break
            row = {r["name"]: r for r in rows}["counter"]
            if listings or not row["alive"]:
                listings.append(row)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert listings, "the head server stopped before a listing showed the crash"
    for row in listings:
        assert row["alive"] is False and row["exit_code"] == -signal.SIGKILL, listings
    assert proc.returncode == 1, out
    assert "server 'counter' exited with signal SIGKILL after start-up" in out
    assert port_is_free(head_port)


# --- supervision and exit codes ------------------------------------------------------------------


def answers_health(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def instances(head_port: int) -> dict[str, dict]:
    return {row["name"]: row for row in server_instances(head_port) or []}


@pytest.mark.parametrize("command", ["run", "collect"])
def test_kill_9_takes_the_servers_down_and_the_next_run_on_the_same_ports_starts(tmp_path, command, gym):
    """The servers of a `gym run` / `gym collect --serve` killed with -9 die with it (they
    answered /health and held their ports before), and the next `gym run` on the same ports starts."""
    ports = {name: free_port() for name in ("head_server", "counter", "policy_model", "counter_agent")}
    overrides = [f"++{name}.port={port}" for name, port in ports.items()]
    env = {"GYM_HOME": str(tmp_path / "home")}
    if command == "run":
        proc = gym.start("run", str(COUNTER_SCRIPTED), "--isolation", "none", *overrides, env=env)
    else:  # so many rollouts that it is still collecting when killed
        proc = gym.start(
            "collect",
            "--serve",
            str(COUNTER_SCRIPTED),
            "--input",
            str(COUNTER_TASKS),
            "--repeats",
            "20000",
            "--output",
            str(tmp_path / "out.jsonl"),
            "--isolation",
            "none",
            "--parallel",
            "1",
            *(f"--set={o}" for o in overrides),
            env=env,
        )
    urls = [f"http://127.0.0.1:{port}" for port in ports.values()]
    try:
        proc.read_until("All servers ready", 120)
        proc.read_on()
        assert all(answers_health(url) for url in urls[1:])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        wait_until(lambda: not any(answers_health(url) for url in urls), "servers still answer /health", 30)
        again = gym.start("run", str(COUNTER_SCRIPTED), "--isolation", "none", *overrides, env=env)
        try:
            again.read_until("All servers ready", 120)
            assert all(answers_health(url) for url in urls)
        finally:
            again.stop()
        assert again.returncode == 0
        assert list((tmp_path / "home" / "runs").glob("*.json")) == []  # the stale file went, and its own
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_server_killed_after_start_up_comes_back_on_its_port_and_status_shows_the_restart(tmp_path, monkeypatch, gym):
    """The server is restarted (same url), the log says its sessions are lost, and `gym status` shows
    one restart for it and all servers healthy."""
    monkeypatch.setenv("GYM_HOME", str(tmp_path / "home"))  # the run's token file is there, for this test to read
    head_port = free_port()
    proc = gym.start(
        "run",
        str(COUNTER_SCRIPTED),
        "--isolation",
        "none",
        f"head_server.port={head_port}",
        "++server_restarts.backoff_s=0",
        env={"GYM_HOME": str(tmp_path / "home")},
    )
    try:
        proc.read_until("All servers ready", 120)
        lines: list[str] = []
        proc.read_on(lines)
        before = instances(head_port)["counter"]
        assert (before["state"], before["restarts"]) == ("running", 0)
        os.kill(before["pid"], signal.SIGKILL)
        after = wait_until(
            lambda: (row := instances(head_port)["counter"])["restarts"] == 1 and row["state"] == "running" and row,
            "counter restarted",
            60,
        )
        assert after["pid"] != before["pid"] and after["url"] == before["url"] and after["alive"]
        assert answers_health(after["url"])
        status = gym.run("status", "--head", f"http://127.0.0.1:{head_port}", "--json", timeout_s=60)
        assert status.returncode == 0, status.stdout + status.stderr
        rows = {row["name"]: row for row in json.loads(status.stdout)}
        assert {name: (row["health"], row["restarts"]) for name, row in rows.items()} == {
            "counter": ("ok", 1),
            "policy_model": ("ok", 0),
            "counter_agent": ("ok", 0),
        }
        assert proc.poll() is None  # gym run goes on serving
    finally:
        proc.stop()
    text = "".join(lines)
    assert "server 'counter' exited with signal SIGKILL after start-up; restarting it" in text, text
    assert "its sessions are lost" in text
    assert proc.returncode == 0


def test_when_the_restart_budget_is_spent_gym_run_exits_1_naming_the_server(tmp_path, monkeypatch, gym):
    """A server that keeps dying stops `gym run` with exit status 1, its name and how it died."""
    monkeypatch.setenv("GYM_HOME", str(tmp_path / "home"))  # the run's token file is there, for this test to read
    head_port = free_port()
    proc = gym.start(
        "run",
        str(COUNTER_SCRIPTED),
        "--isolation",
        "none",
        f"head_server.port={head_port}",
        "++server_restarts.attempts=1",
        "++server_restarts.backoff_s=0",
        env={"GYM_HOME": str(tmp_path / "home")},
    )
    try:
        proc.read_until("All servers ready", 120)
        first = instances(head_port)["policy_model"]["pid"]
        os.kill(first, signal.SIGKILL)
        second = wait_until(
            lambda: (
                (row := instances(head_port)["policy_model"])["restarts"] == 1
                and row["state"] == "running"
                and row["pid"]
            ),
            "policy_model restarted",
            60,
        )
        os.kill(second, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out
    assert "error: server 'policy_model' exited with signal SIGKILL after start-up, and stays down" in out, out
    assert "restarted 1 time(s)" in out
    assert port_is_free(head_port)


def test_a_bad_restart_policy_is_a_config_error(gym):
    out = run_fails(
        gym, str(COUNTER_SCRIPTED), "--isolation", "none", "head_server.port=0", "++server_restarts.attempts=-1"
    )
    assert "server_restarts" in out and "attempts" in out and ">= 0" in out


# --- secrets and the run's token ----------------------------------------------------------------------


def http(method: str, url: str, token: str | None = None, body: dict | None = None) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    data = json.dumps(body).encode() if body is not None else None
    try:
        with opener.open(urllib.request.Request(url, data=data, method=method, headers=headers), timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_secrets_stay_secret_and_every_server_requires_the_run_token(tmp_path, gym):
    """No env.yaml value appears in any head answer or log line; every server (the head too) refuses
    requests without the run's token (401), accepts them with it, and `gym status` finds the token in
    the file `gym run` wrote for the user only."""
    secrets = ["cookie-secret-abcdefgh-123", "sk-live-test-0123456789"]
    (tmp_path / "env.yaml").write_text(f"counter: {{session_secret: {secrets[0]}}}\n_note: {{key: {secrets[1]}}}\n")
    home = tmp_path / "home"
    head_port = free_port()
    env = {"GYM_HOME": str(home), "GYM_LOG_LEVEL": "DEBUG", "GYM_AUTH_TOKEN": None}
    # Run from tmp_path: its env.yaml is the one read.
    proc = gym.start(
        "run", str(COUNTER_SCRIPTED), "--isolation", "none", f"head_server.port={head_port}", env=env, cwd=tmp_path
    )
    head = f"http://127.0.0.1:{head_port}"
    token_path = home / "tokens" / f"127.0.0.1_{head_port}"
    try:
        lines = proc.read_until("All servers ready", 120)
        proc.read_on(lines)
        assert token_path.stat().st_mode & 0o777 == 0o600 and token_path.parent.stat().st_mode & 0o777 == 0o700
        token = token_path.read_text()
        status, text = http("GET", head + "/server_instances", token)
        assert status == 200
        urls = {row["name"]: row["url"] for row in json.loads(text)}
        published = [text]
        for path in ("/global_config_dict_yaml", "/server_instances"):
            assert http("GET", head + path)[0] == 401
            assert http("GET", head + path, "wrong-token")[0] == 401
            status, text = http("GET", head + path, token)
            assert status == 200
            published.append(text)
        assert "<redacted>" in published[1]
        calls = [
            (
                "counter_agent",
                "/run",
                {"responses_create_params": {"input": "x"}, "initial_count": 1, "expected_count": 4},
            ),
            ("policy_model", "/v1/responses", {"input": "hi"}),
            ("counter", "/seed_session", {}),
        ]
        for name, path, body in calls:
            assert http("GET", urls[name] + "/health")[0] == 200  # liveness stays open
            status, text = http("POST", urls[name] + path, None, body)
            assert status == 401 and json.loads(text)["error"]["type"] == "unauthorized", (name, text)
            assert http("POST", urls[name] + path, token, body)[0] == 200, name
        result = gym.run("status", "--head", head, "--json", env=env, timeout_s=60)
        assert result.returncode == 0, result.stderr
        assert all(row["health"] == "ok" for row in json.loads(result.stdout))
    finally:
        proc.stop()
    logged = "".join(lines)
    for secret in secrets:
        assert all(secret not in text for text in published), secret
        assert secret not in logged, secret
    assert not token_path.exists()  # the token dies with its run


def test_a_config_of_a_megabyte_starts_and_never_shows_in_the_environment_or_ps(tmp_path, gym):
    """Each server gets the resolved config on its standard input, not in an environment variable: a
    config over the 128 KiB an environment variable may hold starts (it failed with `Argument list too
    long`), and neither its secrets nor its bulk appear in any server's environment or command line."""
    secret = "cookie-secret-zyxwvuts-987"
    (tmp_path / "env.yaml").write_text(f"counter: {{session_secret: {secret}}}\n")
    padding = "p" * (1024 * 1024)  # kept whole in the config every server gets (a key of no instance)
    config = tmp_path / "big.yaml"
    config.write_text(COUNTER_SCRIPTED.read_text() + f"\n_padding: {padding}\n")
    home = tmp_path / "home"
    head_port = free_port()
    marker = f"marker-{tmp_path.name}"
    env = {"GYM_HOME": str(home), "GYM_TEST_MARKER": marker, "GYM_AUTH_TOKEN": None}
    proc = gym.start("run", str(config), "--isolation", "none", f"head_server.port={head_port}", env=env, cwd=tmp_path)
    try:
        lines = proc.read_until("All servers ready", 120)
        proc.read_on(lines)
        pids = server_pids(marker)
        assert len(pids) == 3
        for pid in pids:
            shown = Path(f"/proc/{pid}/environ").read_bytes() + Path(f"/proc/{pid}/cmdline").read_bytes()
            assert secret.encode() not in shown and padding[:1000].encode() not in shown
            assert len(shown) < 128 * 1024
        token = (home / "tokens" / f"127.0.0.1_{head_port}").read_text()
        status, text = http("GET", f"http://127.0.0.1:{head_port}/server_instances", token)
        urls = {row["name"]: row["url"] for row in json.loads(text)}
        body = {"responses_create_params": {"input": "x"}, "initial_count": 1, "expected_count": 4}
        status, text = http("POST", urls["counter_agent"] + "/run", token, body)
        assert status == 200 and json.loads(text)["reward"] == 1.0, text
        ps = subprocess.run(["ps", "eww", "-e", "-o", "args"], capture_output=True, text=True, timeout=30).stdout
        assert secret not in ps and padding[:1000] not in ps  # `ps e`: every process with its environment
    finally:
        proc.stop()
    assert proc.returncode == 0, "".join(lines)
    assert server_pids(marker) == []
