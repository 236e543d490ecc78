"""docs/guide.md's commands (sections 2 to 5), run as written on a machine where port 11000 is taken:
`gym run` on another port (the guide's own advice), then every other command finds the run without
--head. Three things differ from a user's terminal, each named where it is done: the policy model is
the scripted one (not the embedded model: seconds, not minutes), servers run with --isolation none
(no venvs built), and out/ is a temporary folder."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import socket
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs/guide.md"

# The guide's policy model, replaced by the scripted one: its local_llama options go, its plugin changes.
SCRIPTED_POLICY = (
    "policy_model.plugin=scripted",
    "~policy_model.temperature",
    "~policy_model.max_tokens",
    "~policy_model.batch_size",
    "~policy_model.batch_n_ctx",
)


def guide_commands(first: int, last: int) -> list[list[str]]:
    """The `uv run gym ...` commands of the bash blocks in sections ``first`` to ``last`` of the guide,
    in order, each as the arguments after `gym` (continuation lines joined, comments dropped)."""
    text = GUIDE.read_text()
    sections = re.split(r"^## (\d+)\. ", text, flags=re.MULTILINE)
    commands = []
    for number, body in zip(sections[1::2], sections[2::2]):
        if not first <= int(number) <= last:
            continue
        for block in re.findall(r"```bash\n(.*?)```", body, flags=re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                words = shlex.split(line, comments=True)
                if words:
                    assert words[:3] == ["uv", "run", "gym"], line
                    commands.append(words[3:])
    return commands


@contextlib.contextmanager
def port_taken(port: int) -> Iterator[None]:
    """``port`` on 127.0.0.1 bound by someone else (not listening: a client gets 'connection refused');
    when it is already taken, it stays so."""
    with socket.socket() as sock:
        with contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
        yield


def test_the_guide_runs_as_written_when_port_11000_is_taken(tmp_path, gym):
    commands = guide_commands(2, 5)
    names = [" ".join(words[:1]) for words in commands]
    assert names == ["run", "collect", "collect", "profile", "report", "stop", "reverify", "report"]
    out = tmp_path / "out"
    env = {"GYM_HOME": str(tmp_path / "home")}

    def localize(words: list[str]) -> list[str]:
        return [word.replace("out/", f"{out}/", 1) if word.startswith("out/") else word for word in words]

    with port_taken(11000):
        run_words, *rest = commands
        # As the guide says to when 11000 is taken: head_server.port=0, any free port.
        assert "head_server.port=0" in GUIDE.read_text()
        run = gym.start(*run_words, "head_server.port=0", "--isolation", "none", *SCRIPTED_POLICY, env=env)
        lines: list[str] = []
        try:
            lines = run.read_until("All servers ready", 120)
            run.read_on(lines)
            [head] = re.findall(r"head: (http://[\d.]+:\d+)", "".join(lines))
            assert not head.endswith(":11000")

            status = gym.run("status", "--json", env=env)
            assert status.returncode == 0, status.stderr
            assert {row["name"] for row in json.loads(status.stdout)} == {
                "math",
                "mcqa",
                "policy_model",
                "math_agent",
                "mcqa_agent",
            }

            for words in rest:
                if words[0] == "reverify":  # the servers it starts run with the Python running gym
                    words = [*words, "--isolation", "none"]
                proc = gym.run(*localize(words), env=env, timeout_s=300)
                assert proc.returncode == 0, f"gym {shlex.join(words)}:\n{proc.stdout}\n{proc.stderr}"
                if words[0] == "stop":
                    assert f"head {head}" in proc.stdout
                    assert run.wait(timeout=60) == 0
        finally:
            run.stop()

    rows = {name: (out / f"{name}.jsonl").read_text().splitlines() for name in ("math", "mcqa", "mcqa.lenient")}
    assert [len(rows[name]) for name in ("math", "mcqa", "mcqa.lenient")] == [15 * 4, 7 * 4, 7 * 4]
    assert all("previous_reward" in json.loads(line) for line in rows["mcqa.lenient"])
    assert (out / "report.html").stat().st_size > 0 and (out / "mcqa.html").stat().st_size > 0
    assert list((tmp_path / "home" / "runs").glob("*.json")) == []  # every run ended


def test_a_command_that_talks_to_a_run_asks_which_when_several_run(tmp_path, gym):
    """With two runs and no --head, collect, reverify, status and stop list both and exit 2, starting
    nothing; --head picks one. With none, collect says nothing answers and exits 2, as --help says."""
    config = ROOT / "plugins/resources/counter/configs/counter_scripted.yaml"
    tasks = ROOT / "plugins/resources/counter/data/example.jsonl"
    env = {"GYM_HOME": str(tmp_path / "home")}
    runs = []
    try:
        for _ in range(2):
            proc = gym.start("run", str(config), "--isolation", "none", "head_server.port=0", env=env)
            runs.append(proc)
        heads = []
        for proc in runs:
            lines = proc.read_until("All servers ready", 120)
            proc.read_on()
            heads += re.findall(r"head: (http://[\d.]+:\d+)", "".join(lines))
        assert len(heads) == 2
        out = tmp_path / "rollouts.jsonl"
        chosen = gym("collect", "--input", str(tasks), "--output", str(out), "--head", heads[1], env=env)
        assert chosen.exit_code == 0, chosen.output
        assert len(out.read_text().splitlines()) == len(tasks.read_text().splitlines())
        for words in (
            ["collect", "--input", str(tasks), "--output", str(tmp_path / "more.jsonl")],
            ["reverify", str(out), "--output", str(tmp_path / "reverified.jsonl")],
            ["status"],
            ["stop"],
        ):
            result = gym(*words, env=env)
            assert result.exit_code == 2, (words, result.output)
            assert "--head" in result.stderr and all(head in result.stderr for head in heads), result.stderr
        assert not (tmp_path / "more.jsonl").exists() and not (tmp_path / "reverified.jsonl").exists()
        assert all(proc.poll() is None for proc in runs)
    finally:
        for proc in runs:
            proc.stop()

    with port_taken(11000):  # no run recorded: the default head, where nothing answers
        nobody = gym.run("collect", "--input", str(tasks), "--output", str(tmp_path / "none.jsonl"), env=env)
    assert nobody.returncode == 2, nobody.stderr
    assert "cannot reach the head server" in nobody.stderr and "Traceback" not in nobody.stderr


def test_collect_and_reverify_help_promise_what_they_do(gym):
    for command in ("collect", "reverify"):
        help_text = " ".join(gym(command, "--help").output.split())
        assert "2 when nothing could start" in help_text and "only run of this user" in help_text
