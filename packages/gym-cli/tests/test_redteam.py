"""gym redteam: probes played through an environment's real agent and endpoints find a deliberately
gameable third-party environment (gym's probes and the probes it declares through the
gym_redteam_probes hook), report it gameable with exit status 1, and find nothing in gym's own
first-party environments."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import gym_core.plugins
from gym_core import AgentServer, ResourcesServer, hookimpl
from gym_core.errors import ServerCallError
from gym_core.options import ServerConfig
from gym_core.plugins import PluginManager
from gym_core.redteam import PROBES, Attack, Target, probe
from gym_core.schemas import FunctionCall, RunRequest, VerifyRequest, VerifyResponse, assistant_text
from gym_core.sessions import Session

from gym_cli.example_rollouts import environment_directories
from gym_cli.redteam import ERROR, GAMEABLE, ROBUST, checks_of_config, checks_of_directory, run_check, summarise
from gym_simple_agent.config import SimpleAgentConfig

ROOT = Path(__file__).resolve().parents[3]


class LenientVerifyRequest(VerifyRequest, kw_only=True):
    expected_answer: str


class LenientEnvironment(ResourcesServer):
    """Deliberately gameable: an answer scores when it *contains* the expected one anywhere (so a list
    of candidates scores), or when it says the magic word only this environment knows."""

    async def verify(self, session: Session, body: LenientVerifyRequest) -> VerifyResponse:
        text = assistant_text(body.response)
        if len(text) > 100_000:
            raise RuntimeError("too long for this environment")  # a 500, as a careless verifier gives
        return VerifyResponse(reward=float(body.expected_answer in text or "xyzzy" in text))


@probe("magic_word", "format", "the word the lenient environment accepts whatever the task")
def magic_word(target: Target) -> Attack | None:
    return Attack(({"text": "xyzzy"},))


@probe("never_applies", "format", "a probe whose build returns None")
def never_applies(target: Target) -> Attack | None:
    return None


class ForwardingAgent(AgentServer):
    """Deliberately unsafe: it posts every function call of the model to the environment's route of
    that name, control routes and tools nobody offered included, then verifies the last text."""

    config: SimpleAgentConfig

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        async with self.rollout(task) as rollout:
            params = await rollout.offer(body.responses_create_params)
            response = await rollout.call_model(params)
            for item in response.output:
                if isinstance(item, FunctionCall):
                    with contextlib.suppress(ServerCallError):
                        await rollout.post(f"/{item.name}", item.arguments.encode())
            verdict = await rollout.verify(params, response)
            return rollout.result(verdict, response)


class LenientPlugin:
    @hookimpl
    def gym_register_servers(self, register: Any) -> None:
        register(name="lenient_env", kind="resources", server=LenientEnvironment, config=ServerConfig)
        register(name="forwarding_agent", kind="agent", server=ForwardingAgent, config=SimpleAgentConfig)

    @hookimpl
    def gym_redteam_probes(self, register: Any) -> None:
        register(environment="lenient_env", probes=[magic_word, never_applies])


CONFIG = {
    "lenient_env": {"plugin": "lenient_env"},
    "policy": {"plugin": "scripted"},
    "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "lenient_env", "max_steps": 1},
}
ROWS = [
    {
        "responses_create_params": {"input": [{"role": "user", "content": "What is 6 x 7? Box it."}]},
        "expected_answer": "42",
        "conformance": {"response": "6 x 7 = \\boxed{42}", "reward": 1.0},
    },
    {
        "responses_create_params": {"input": [{"role": "user", "content": "What is 2 + 2? Box it."}]},
        "expected_answer": "4",
        "conformance": {"response": "It is \\boxed{5}", "reward": 0.0},
    },
]


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch) -> PluginManager:
    """gym's installed plugins and the lenient one, as the process-wide plugin manager."""
    manager = PluginManager()
    manager.register(LenientPlugin(), name="lenient")
    monkeypatch.setattr(gym_core.plugins, "_manager", manager)
    return manager


def test_a_lenient_environment_is_found_gameable_by_gym_s_probes_and_its_own(plugins: PluginManager):
    checks = checks_of_config("lenient", CONFIG, ROWS, plugins, plugins.redteam_declarations())
    assert [c.judge for c in checks] == [None]  # no model but the policy: no judge to swap
    (check,) = checks
    results, problems = run_check(check, plugins)
    assert problems == []
    verdicts = {(r.probe, r.task_index): r for r in results}
    # A list of candidates holding the right one scores 1, more than a guess among them earns.
    assert verdicts["answer_list", 0].reward == 1.0 and verdicts["answer_list", 0].verdict == GAMEABLE
    assert verdicts["boxed_many_last", 0].verdict == GAMEABLE
    # The environment's own probe ran on every task; the one that never applies is not listed.
    assert verdicts["magic_word", 0].verdict == verdicts["magic_word", 1].verdict == GAMEABLE
    assert not any(r.probe == "never_applies" for r in results)
    # What does not score stays robust: the empty answer, a forged cookie (refused with 403).
    assert verdicts["empty", 0].reward == 0.0 and verdicts["empty", 0].verdict == ROBUST
    assert verdicts["huge", 0].verdict == ERROR and verdicts["huge", 0].status == 502  # the agent relays the 500
    assert verdicts["forged_cookie", 0].reward is None and verdicts["forged_cookie", 0].status == 403
    # The task without a solving answer gets no probe that reshapes one.
    assert ("answer_list", 1) not in verdicts
    summary = {s.probe: s for s in summarise(check, results)}
    assert summary["magic_word"].tasks == 2 and summary["magic_word"].verdict == GAMEABLE
    assert summary["empty"].verdict == ROBUST and summary["empty"].reward == 0.0


def test_an_agent_that_forwards_the_model_s_calls_to_the_environment_is_found(plugins: PluginManager):
    """Tool-call abuse must not reach the environment, whatever it scores: simple_agent answers an
    unoffered tool and a control route itself; the forwarding agent posts them on."""
    safe = checks_of_config("safe", CONFIG, ROWS[:1], plugins, plugins.redteam_declarations())[0]
    results, _ = run_check(safe, plugins)
    verdicts = {r.probe: r for r in results}
    assert verdicts["unoffered_tool"].verdict == verdicts["control_routes"].verdict == ROBUST
    forwarding = {**CONFIG, "agent": {**CONFIG["agent"], "plugin": "forwarding_agent"}}
    unsafe = checks_of_config("unsafe", forwarding, ROWS[:1], plugins, plugins.redteam_declarations())[0]
    results, _ = run_check(unsafe, plugins)
    verdicts = {r.probe: r for r in results}
    for name in ("unoffered_tool", "control_routes"):
        assert verdicts[name].reward == 0.0  # it scored nothing, and is still found
        assert verdicts[name].verdict == GAMEABLE, verdicts[name]
    assert "/redteam_unoffered_tool" in verdicts["unoffered_tool"].detail
    assert "/seed_session" in verdicts["control_routes"].detail and "/verify" in verdicts["control_routes"].detail


def test_gym_redteam_exits_1_naming_the_gameable_probes_and_writes_json(gym, plugins, tmp_path: Path):
    config = tmp_path / "lenient.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    result = gym("redteam", "--config", str(config), "--input", str(rows), "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    gameable = {s["probe"] for s in report["results"] if s["verdict"] == GAMEABLE}
    assert {"magic_word", "answer_list", "boxed_many_first", "boxed_many_last"} <= gameable
    assert report["gameable"] == len(gameable)
    assert {s["probe"] for s in report["results"]} >= {"empty", "huge", "unoffered_tool", "forged_cookie"}
    assert "magic_word" in result.stderr
    # A 500 is neither a reward nor a refusal: an error, which fails the command too.
    (huge,) = [s for s in report["results"] if s["probe"] == "huge"]
    assert (huge["verdict"], huge["reward"], report["errors"]) == ("error", None, 1)
    # The table, and the threshold: past 1.0 nothing is gameable; the error still fails the command.
    table = gym("redteam", "--config", str(config), "--input", str(rows), "--threshold", "1")
    assert table.exit_code == 1, table.output
    assert "magic_word" in table.stdout and "robust" in table.stdout
    assert "gameable probe" not in table.stderr and "server error" in table.stderr and "huge" in table.stderr


def test_a_judged_environment_is_probed_with_its_scripted_judge_and_with_the_quoting_judge(plugins):
    (directory,) = [d for d in environment_directories(ROOT) if d.name == "equivalence_llm_judge"]
    checks = checks_of_directory(directory, plugins, plugins.redteam_declarations(), count=1)
    assert [c.judge for c in checks] == ["scripted", "quoting"]
    assert checks[1].config["judge"]["plugin"] == "redteam_quoting_judge"
    assert checks[1].label == "equivalence_llm_judge (quoting judge)"
    results, problems = run_check(checks[1], plugins)
    assert problems == []
    played = {r.probe for r in results}
    # Judge probes are played; hedges are not, since a judge model, not a script, rules on them.
    assert {"verdict_label", "prompt_injection"} <= played
    assert not played & {p.name for p in PROBES if p.hedge}


def test_the_docs_example_declares_its_probe_through_the_hook():
    import importlib.util

    spec = importlib.util.spec_from_file_location("redteam_probes", ROOT / "docs" / "examples" / "redteam_probes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    manager = PluginManager(load_entry_points=False)
    manager.register(module, name="redteam_probes")
    declaration = manager.redteam_declarations()["my_env"]
    assert [p.name for p in declaration.probes] == ["magic_word"]
    assert declaration.judge_verdict == "Ruling: [[WRONG]]"
    attack = declaration.probes[0].build(Target("my_env", {}))
    assert attack is not None and attack.turns == ({"text": "xyzzy"},)


def test_every_first_party_environment_has_no_gameable_probe(plugins):
    """What .ci/run checks with `gym redteam`: every first-party environment, both judges."""
    declarations = plugins.redteam_declarations()
    gameable: list[str] = []
    problems: list[str] = []
    for directory in environment_directories(ROOT):
        for check in checks_of_directory(directory, plugins, declarations):
            results, trouble = run_check(check, plugins)
            problems += trouble
            # Every environment is probed: the session tricks and tool abuse at least.
            assert {"forged_cookie", "unoffered_tool", "control_routes"} <= {r.probe for r in results}, check.label
            gameable += [
                f"{s.environment}/{s.probe}: {s.reward} > {s.baseline}"
                for s in summarise(check, results)
                if s.verdict in (GAMEABLE, ERROR) and not s.reference
            ]
    assert problems == []
    assert gameable == []
