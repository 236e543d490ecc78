"""gym run as a user runs it: a real process, real servers, Ctrl+C, failure paths."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from gym_core.auth import token_for_head

ROOT = Path(__file__).resolve().parents[3]
COUNTER_SCRIPTED = ROOT / "plugins/resources/counter/configs/counter_scripted.yaml"
COUNTER_TASKS = ROOT / "plugins/resources/counter/data/example.jsonl"


def gym(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gym_cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        start_new_session=True,
    )


def wait_for(proc: subprocess.Popen, text: str, timeout_s: float) -> list[str]:
    """Lines printed until ``text`` appears (fails if the process exits first)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            pytest.fail("gym exited early:\n" + "".join(lines))
        lines.append(line)
        if text in line:
            return lines
    pytest.fail(f"{text!r} not seen within {timeout_s} s:\n" + "".join(lines))


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


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_until_ready_then_sigint(args: list[str], env: dict, timeout_s: float) -> tuple[list[str], str]:
    marker = env["GYM_TEST_MARKER"]
    proc = gym("run", *args, env=env)
    try:
        lines = wait_for(proc, "All servers ready", timeout_s)
        assert len(server_pids(marker)) == 3
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, "".join(lines) + rest
    return lines, rest


@pytest.mark.parametrize("isolation", ["none", "venv"])
def test_run_ready_then_ctrl_c_leaves_nothing_behind(tmp_path, isolation):
    head_port = free_port()
    env = {"GYM_HOME": str(tmp_path / "home"), "GYM_TEST_MARKER": f"marker-{tmp_path.name}"}
    args = [str(COUNTER_SCRIPTED), "--isolation", isolation, f"head_server.port={head_port}"]
    lines, rest = run_until_ready_then_sigint(args, env, timeout_s=300)
    text = "".join(lines)
    for name in ("counter", "policy_model", "counter_agent"):
        assert name in text
    assert "all servers stopped" in rest
    time.sleep(0.5)
    assert server_pids(env["GYM_TEST_MARKER"]) == []
    assert port_is_free(head_port)
    if isolation == "venv":
        assert "built venv for counter" in text
        # The second run reuses the three venvs: no build.
        lines, _ = run_until_ready_then_sigint(args, env, timeout_s=120)
        text = "".join(lines)
        assert "reused venv for counter" in text and "built venv" not in text


def test_sigterm_also_stops_cleanly(tmp_path):
    env = {"GYM_TEST_MARKER": f"marker-{tmp_path.name}"}
    proc = gym("run", str(COUNTER_SCRIPTED), "--isolation", "none", "head_server.port=0", env=env)
    try:
        wait_for(proc, "All servers ready", 120)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0
    time.sleep(0.5)
    assert server_pids(env["GYM_TEST_MARKER"]) == []


def test_child_crash_during_start_up_fails_with_its_last_lines(tmp_path):
    config = tmp_path / "broken.yaml"
    config.write_text("policy:\n  plugin: local_llama\n  model_path: /nonexistent/model.gguf\n")
    proc = gym("run", str(config), "--isolation", "none", "head_server.port=0")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, out  # a server failed (not a usage error: the config is valid)
    assert "server 'policy' exited" in out and "while starting" in out and "/nonexistent/model.gguf" in out


def run_fails(*args: str, code: int = 2) -> str:
    """The output of a `gym run` that exits with ``code`` (2: bad usage, config or input)."""
    proc = gym("run", *args)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == code, out
    return out


def test_config_file_not_found():
    out = run_fails("nope.yaml", "--isolation", "none")
    assert "config file not found: nope.yaml" in out


def test_unknown_plugin_did_you_mean(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("env:\n  plugin: countr\n")
    out = run_fails(str(config), "--isolation", "none", "head_server.port=0")
    assert "unknown server type 'countr'" in out and "did you mean 'counter'" in out


def test_head_port_in_use(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        out = run_fails(str(COUNTER_SCRIPTED), "--isolation", "none", f"head_server.port={port}")
    assert f"port {port}" in out and "in use" in out


def test_status_without_servers():
    proc = subprocess.run([sys.executable, "-m", "gym_cli", "status", "--head", f"http://127.0.0.1:{free_port()}"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "no gym servers are running" in proc.stderr


def test_status_lists_running_servers(tmp_path):
    head_port = free_port()
    proc = gym("run", str(COUNTER_SCRIPTED), "--isolation", "none", f"head_server.port={head_port}")
    try:
        wait_for(proc, "All servers ready", 120)
        status = subprocess.run([sys.executable, "-m", "gym_cli", "status", "--head", f"http://127.0.0.1:{head_port}", "--json"],
                                capture_output=True, text=True, timeout=60)
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
    request = urllib.request.Request(head + "/server_instances", headers={"Authorization": f"Bearer {token_for_head(head)}"})
    try:
        with opener.open(request, timeout=10) as response:
            return json.loads(response.read())
    except OSError:
        return None


def test_a_server_dying_after_start_up_is_reported_however_often_it_is_listed():
    """Listing the servers (what `gym status` does) must not consume the crash report:
    `gym run` still reports the crash and exits 1, and every listing says the server is dead."""
    head_port = free_port()
    proc = gym("run", str(COUNTER_SCRIPTED), "--isolation", "none", f"head_server.port={head_port}",
               "++server_restarts.attempts=0")  # no restarts: the first death stops gym run
    try:
        wait_for(proc, "All servers ready", 120)
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


def wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"{what}: not within {timeout_s} s")


def instances(head_port: int) -> dict[str, dict]:
    return {row["name"]: row for row in server_instances(head_port) or []}


def drain(proc: subprocess.Popen) -> list[str]:
    """Keep reading ``proc``'s output in a thread (so that its servers never block on a full pipe)."""
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return lines


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.parametrize("command", ["run", "collect"])
def test_kill_9_takes_the_servers_down_and_the_next_run_on_the_same_ports_starts(tmp_path, command):
    """The servers of a `gym run` / `gym collect --serve` killed with -9 die with it (they
    answered /health and held their ports before), and the next `gym run` on the same ports starts."""
    ports = {name: free_port() for name in ("head_server", "counter", "policy_model", "counter_agent")}
    overrides = [f"++{name}.port={port}" for name, port in ports.items()]
    env = {"GYM_HOME": str(tmp_path / "home")}
    if command == "run":
        proc = gym("run", str(COUNTER_SCRIPTED), "--isolation", "none", *overrides, env=env)
    else:  # so many rollouts that it is still collecting when killed
        proc = gym("collect", "--serve", str(COUNTER_SCRIPTED), "--input", str(COUNTER_TASKS), "--repeats", "20000",
                   "--output", str(tmp_path / "out.jsonl"), "--isolation", "none", "--parallel", "1",
                   *(f"--set={o}" for o in overrides), env=env)
    urls = [f"http://127.0.0.1:{port}" for port in ports.values()]
    try:
        wait_for(proc, "All servers ready", 120)
        drain(proc)
        assert all(answers_health(url) for url in urls[1:])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        wait_until(lambda: not any(answers_health(url) for url in urls), 30, "servers still answer /health")
        again = gym("run", str(COUNTER_SCRIPTED), "--isolation", "none", *overrides, env=env)
        try:
            wait_for(again, "All servers ready", 120)
            assert all(answers_health(url) for url in urls)
        finally:
            stop(again)
        assert again.returncode == 0
        assert list((tmp_path / "home" / "runs").glob("*.json")) == []  # the stale file went, and its own
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_server_killed_after_start_up_comes_back_on_its_port_and_status_shows_the_restart(tmp_path, monkeypatch):
    """The server is restarted (same url), the log says its sessions are lost, and `gym status` shows
    one restart for it and all servers healthy."""
    monkeypatch.setenv("GYM_HOME", str(tmp_path / "home"))  # the run's token file is there, for this test to read
    head_port = free_port()
    proc = gym("run", str(COUNTER_SCRIPTED), "--isolation", "none", f"head_server.port={head_port}",
               "++server_restarts.backoff_s=0", env={"GYM_HOME": str(tmp_path / "home")})
    try:
        wait_for(proc, "All servers ready", 120)
        lines = drain(proc)
        before = instances(head_port)["counter"]
        assert (before["state"], before["restarts"]) == ("running", 0)
        os.kill(before["pid"], signal.SIGKILL)
        after = wait_until(lambda: (row := instances(head_port)["counter"])["restarts"] == 1
                           and row["state"] == "running" and row, 60, "counter restarted")
        assert after["pid"] != before["pid"] and after["url"] == before["url"] and after["alive"]
        assert answers_health(after["url"])
        status = subprocess.run([sys.executable, "-m", "gym_cli", "status", "--head", f"http://127.0.0.1:{head_port}",
                                 "--json"], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stdout + status.stderr
        rows = {row["name"]: row for row in json.loads(status.stdout)}
        assert {name: (row["health"], row["restarts"]) for name, row in rows.items()} == {
            "counter": ("ok", 1), "policy_model": ("ok", 0), "counter_agent": ("ok", 0)}
        assert proc.poll() is None  # gym run goes on serving
    finally:
        stop(proc)
    text = "".join(lines)
    assert "server 'counter' exited with signal SIGKILL after start-up; restarting it" in text, text
    assert "its sessions are lost" in text
    assert proc.returncode == 0


def test_when_the_restart_budget_is_spent_gym_run_exits_1_naming_the_server(tmp_path, monkeypatch):
    """A server that keeps dying stops `gym run` with exit status 1, its name and how it died."""
    monkeypatch.setenv("GYM_HOME", str(tmp_path / "home"))  # the run's token file is there, for this test to read
    head_port = free_port()
    proc = gym("run", str(COUNTER_SCRIPTED), "--isolation", "none", f"head_server.port={head_port}",
               "++server_restarts.attempts=1", "++server_restarts.backoff_s=0", env={"GYM_HOME": str(tmp_path / "home")})
    try:
        wait_for(proc, "All servers ready", 120)
        first = instances(head_port)["policy_model"]["pid"]
        os.kill(first, signal.SIGKILL)
        second = wait_until(lambda: (row := instances(head_port)["policy_model"])["restarts"] == 1
                            and row["state"] == "running" and row["pid"], 60, "policy_model restarted")
        os.kill(second, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, out
    assert "error: server 'policy_model' exited with signal SIGKILL after start-up, and stays down" in out, out
    assert "restarted 1 time(s)" in out
    assert port_is_free(head_port)


def test_a_bad_restart_policy_is_a_config_error():
    out = run_fails(str(COUNTER_SCRIPTED), "--isolation", "none", "head_server.port=0", "++server_restarts.attempts=-1")
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


def test_secrets_stay_secret_and_every_server_requires_the_run_token(tmp_path):
    """No env.yaml value appears in any head answer or log line; every server (the head too) refuses
    requests without the run's token (401), accepts them with it, and `gym status` finds the token in
    the file `gym run` wrote for the user only."""
    secrets = ["cookie-secret-abcdefgh-123", "sk-live-test-0123456789"]
    (tmp_path / "env.yaml").write_text(f"counter: {{session_secret: {secrets[0]}}}\n_note: {{key: {secrets[1]}}}\n")
    home = tmp_path / "home"
    head_port = free_port()
    env = {**os.environ, "COLUMNS": "200", "GYM_HOME": str(home), "GYM_LOG_LEVEL": "DEBUG"}
    env.pop("GYM_AUTH_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "gym_cli", "run", str(COUNTER_SCRIPTED), "--isolation", "none",
                             f"head_server.port={head_port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=tmp_path, env=env, start_new_session=True)
    head = f"http://127.0.0.1:{head_port}"
    token_path = home / "tokens" / f"127.0.0.1_{head_port}"
    try:
        lines = wait_for(proc, "All servers ready", 120)
        lines += drain(proc)
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
        calls = [("counter_agent", "/run", {"responses_create_params": {"input": "x"}, "initial_count": 1, "expected_count": 4}),
                 ("policy_model", "/v1/responses", {"input": "hi"}), ("counter", "/seed_session", {})]
        for name, path, body in calls:
            assert http("GET", urls[name] + "/health")[0] == 200  # liveness stays open
            status, text = http("POST", urls[name] + path, None, body)
            assert status == 401 and json.loads(text)["error"]["type"] == "unauthorized", (name, text)
            assert http("POST", urls[name] + path, token, body)[0] == 200, name
        result = subprocess.run([sys.executable, "-m", "gym_cli", "status", "--head", head, "--json"],
                                capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == 0, result.stderr
        assert all(row["health"] == "ok" for row in json.loads(result.stdout))
    finally:
        stop(proc)
    logged = "".join(lines)
    for secret in secrets:
        assert all(secret not in text for text in published), secret
        assert secret not in logged, secret
    assert not token_path.exists()  # the token dies with its run
