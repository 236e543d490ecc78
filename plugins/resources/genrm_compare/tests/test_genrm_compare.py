"""genrm_compare over real HTTP: gym's conformance kit, then /compare and the cohorts of /verify.

The reward model is gym's scripted model behind a real genrm_model server (text rendering): its
``rules`` answer each ordered pair of known answers with a fixed verdict, so every reward below is
known whatever order the concurrent rollouts arrive in. Answers: GOOD (scored 5), OKAY (3), BAD (1);
TIE_A/TIE_B (3 and 3, ranking 2: the tiebreak); GARBAGE (a reply without a verdict); FAILJUDGE (the
reward model answers 500).
"""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_core import ServerClient
from gym_core.testing import (
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    running_servers,
    wait_until,
)

import gym_genrm_compare.plugin
import gym_genrm_model.plugin
import gym_scripted.plugin
from gym_genrm_compare.config import DEFAULT_PRINCIPLE

PACKAGE = Path(__file__).resolve().parents[1]
QUALITY = {"GOOD": 5, "OKAY": 3, "BAD": 1}
PROMPT = "Explain why the sky is blue."
PLUGINS = [gym_genrm_compare.plugin, gym_genrm_model.plugin, gym_scripted.plugin]


def verdict(score_1: float, score_2: float, ranking: float) -> str:
    return json.dumps({"score_1": score_1, "score_2": score_2, "ranking": ranking})


def pair_rule(first: str, second: str, text: str) -> dict[str, str]:
    # genrm_model's text rendering: "[Response 1]\n<answer>\n\n[Response 2]\n<answer>\n"
    return {"match": rf"\[Response 1\]\n{re.escape(first)}\n\n\[Response 2\]\n{re.escape(second)}\n", "text": text}


def reward_model_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = [
        {"match": "FAILJUDGE", "error_status": 500},
        {"match": "GARBAGE", "text": "Both responses have merit; I cannot decide."},
        {"match": "principle: PRINCIPLE_X", "text": verdict(1, 5, 6)},
        {"match": re.escape(DEFAULT_PRINCIPLE[:60]), "text": "```json\n" + verdict(2, 4, 5) + "\n```"},
        pair_rule("TIE_A", "TIE_B", verdict(3, 3, 2)),
        pair_rule("TIE_B", "TIE_A", verdict(3, 3, 2)),
    ]
    for first, q1 in QUALITY.items():
        for second, q2 in QUALITY.items():
            if first != second:
                ranking = 1 if q1 > q2 else 6
                rules.append(pair_rule(first, second, f"Reasoning... {{draft}} {verdict(q1, q2, ranking)}"))
    return rules


def env(**options: Any) -> dict[str, Any]:
    return {
        "plugin": "genrm_compare",
        "judge_model_server": "genrm",
        "judge_max_attempts": 1,
        "genrm_parse_retries": 1,
        "genrm_parse_retry_sleep_s": 0.0,
        **options,
    }


def row(answer: str, prompt: str = PROMPT, **fields: Any) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": prompt}]},
        "response": assistant_response(answer),
        **fields,
    }


def concurrently(servers: RunningServers, instance: str, bodies: list[dict[str, Any]]) -> list[Any]:
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda body: servers.caller(instance).post("/verify", body), bodies))


class TestGenrmCompare(ResourcesServerTests):
    plugins = PLUGINS
    instance = "genrm_compare"
    example_data = PACKAGE / "data" / "example.jsonl"
    instances = {
        "rm": {"plugin": "scripted", "rules": reward_model_rules(), "turns": [{"text": "no rule matched"}]},
        "genrm": {"plugin": "genrm_model", "upstream_model_server": "rm", "max_attempts": 1},
        # Under the kit: one rollout per prompt, so every verify gets default_score at once.
        "genrm_compare": env(),
        "cohort": env(num_rollouts_per_prompt=3),
        "pairs": env(num_rollouts_per_prompt=2),
        "batch": env(comparison_strategy="all_pairs", num_judges_per_comparison=2),
        "principled": env(use_principle=True),
        "adjusted": env(answer_bonus=0.5, group_answer_length_penalty_coeff=1.0),
        "short": env(num_rollouts_per_prompt=3, cohort_timeout_s=0.5),
        "short_fail": env(num_rollouts_per_prompt=3, cohort_timeout_s=0.3, cohort_timeout_action="fail"),
        "one_cohort": env(num_rollouts_per_prompt=2, cohort_timeout_s=5, max_open_cohorts=1),
    }

    def malformed_bodies(self, servers: RunningServers) -> dict[str, list[bytes]]:
        bodies = super().malformed_bodies(servers)
        bodies["/compare"] = [
            b'{"not": json',
            b"[1, 2, 3]",
            b"{}",
            b'{"conversation_history": [], "response_objs": 5}',
            b'{"conversation_history": 7, "response_objs": []}',
        ]
        return bodies

    # --- /verify with one rollout per prompt ---

    def test_single_rollouts_get_the_default_score(self, gym_servers: RunningServers):
        verdict_ = gym_servers.caller().post("/verify", row("GOOD")).json()
        assert verdict_["reward"] == 3.0 and verdict_["num_comparisons"] == 0 and verdict_["cohort_size"] == 1

    def test_a_missing_field_is_a_422_naming_it(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/verify", {"response": assistant_response("x")})
        assert reply.status == 422 and "responses_create_params" in reply.json()["error"]["message"], reply.text

    # --- /compare ---

    def compare(self, servers: RunningServers, instance: str, answers: list[str], **body: Any) -> dict[str, Any]:
        request = {
            "conversation_history": [{"role": "user", "content": PROMPT}],
            "response_objs": [assistant_response(a) for a in answers],
            **body,
        }
        reply = servers.caller(instance).post("/compare", request)
        assert reply.status == 200, reply.text
        return reply.json()

    def test_compare_circular(self, gym_servers: RunningServers):
        result = self.compare(gym_servers, "genrm_compare", ["GOOD", "OKAY", "BAD"])
        assert result["rewards"] == [5.0, 3.0, 1.0]
        assert [(r["response_1"], r["response_2"]) for r in result["comparison_results"]] == [(0, 1), (1, 2), (2, 0)]
        assert all(r["parsed"] and r["attempts"] == 1 for r in result["comparison_results"])
        assert result["metrics"] == {
            "mean_individual_score": 3.0,
            "std_individual_score": pytest.approx((8 / 3) ** 0.5),
            "tiebreak_usage_rate": 0.0,
        }

    def test_compare_all_pairs_with_two_judges(self, gym_servers: RunningServers):
        result = self.compare(gym_servers, "batch", ["BAD", "GOOD", "OKAY"])
        assert result["rewards"] == [1.0, 5.0, 3.0]
        pairs = [(r["response_1"], r["response_2"], r["judge"]) for r in result["comparison_results"]]
        assert pairs == [(0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 2, 0), (1, 2, 1)]

    def test_compare_tiebreak(self, gym_servers: RunningServers):
        result = self.compare(gym_servers, "batch", ["TIE_A", "TIE_B"])
        # Scores 3 and 3, ranking 2: adj = 1.5 to response 1, twice (two judges).
        assert result["rewards"] == [4.5, 1.5]
        assert result["metrics"]["tiebreak_usage_rate"] == 1.0

    def test_no_verdict_after_the_retries_gives_the_neutral_defaults(self, gym_servers: RunningServers):
        result = self.compare(gym_servers, "genrm_compare", ["GOOD", "GARBAGE"])
        assert result["rewards"] == [3.0, 3.0]
        for record in result["comparison_results"]:
            assert (record["score_1"], record["score_2"], record["ranking"]) == (3.0, 3.0, 3.5)
            assert not record["parsed"] and record["attempts"] == 2  # genrm_parse_retries: 1
            assert record["error"] == "no verdict in 2 replies"

    def test_a_failed_judge_gives_the_neutral_defaults_not_a_failure(self, gym_servers: RunningServers):
        # The spec's one exception to judge_failed: genrm_compare never fails for its judge.
        result = self.compare(gym_servers, "genrm_compare", ["FAILJUDGE", "GOOD"])
        assert result["rewards"] == [3.0, 3.0]
        assert all(not r["parsed"] and "judge 'genrm' failed" in r["error"] for r in result["comparison_results"])
        # ...also when the judge instance is unreachable: the defaults, not a 502.
        verdicts = concurrently(
            gym_servers, "pairs", [row("GOOD", prompt="FAILJUDGE?"), row("BAD", prompt="FAILJUDGE?")]
        )
        assert [v.status for v in verdicts] == [200, 200] and [v.json()["reward"] for v in verdicts] == [3.0, 3.0]
        assert all(v.json()["num_default_comparisons"] == 2 for v in verdicts)

    def test_principle_only_with_use_principle(self, gym_servers: RunningServers):
        with_principle = self.compare(gym_servers, "principled", ["GOOD", "BAD"], principle="PRINCIPLE_X")
        assert with_principle["rewards"] == [3.0, 3.0]  # (1, 5) then (1, 5) from the other side: each side 1 and 5
        assert with_principle["comparison_results"][0]["score_2"] == 5.0
        # The row has none: the default principle is sent (its rule answers 2, 4 in a json fence).
        default = self.compare(gym_servers, "principled", ["GOOD", "BAD"])
        assert [r["score_1"] for r in default["comparison_results"]] == [2.0, 2.0]
        # Without use_principle, the row's principle is not sent.
        assert self.compare(gym_servers, "genrm_compare", ["GOOD", "BAD"], principle="PRINCIPLE_X")["rewards"] == [
            5.0,
            1.0,
        ]

    def test_adjustments(self, gym_servers: RunningServers):
        result = self.compare(gym_servers, "adjusted", ["GOOD", "OKAY", "BAD"])
        # Answer lengths 4, 4, 3: BAD is shortest (weight 1, the others 0; mean 1/3) but not in the top
        # 20% (GOOD is): no bonus. Length adjustment: -1/3, -1/3, +2/3.
        assert result["rewards"] == pytest.approx([5 - 1 / 3, 3 - 1 / 3, 1 + 2 / 3])

    # --- /verify in cohorts ---

    def test_a_cohort_is_released_together_with_its_own_rewards(self, gym_servers: RunningServers):
        server = gym_servers.servers["cohort"]
        answers = ["BAD", "GOOD", "OKAY"]
        with ThreadPoolExecutor(3) as pool:
            first = [pool.submit(gym_servers.caller("cohort").post, "/verify", row(a)) for a in answers[:2]]
            # Both wait in one open cohort until the third arrives.
            wait_until(lambda: any(len(c.candidates) == 2 for c in server.cohorts.values()), "two rollouts buffered")
            assert not any(f.done() for f in first)
            last = pool.submit(gym_servers.caller("cohort").post, "/verify", row(answers[2]))
            replies = [f.result() for f in [*first, last]]
        verdicts = [r.json() for r in replies]
        assert [v["reward"] for v in verdicts] == [1.0, 5.0, 3.0]
        assert [v["genrm_scores"] for v in verdicts] == [[1.0, 1.0], [5.0, 5.0], [3.0, 3.0]]
        assert sorted(v["cohort_index"] for v in verdicts) == [0, 1, 2]
        assert all(v["cohort_size"] == 3 and v["cohort_complete"] and v["num_comparisons"] == 2 for v in verdicts)
        assert all(v["mean_individual_score"] == 3.0 and v["tiebreak_usage_rate"] == 0.0 for v in verdicts)
        assert server.cohorts == {}  # decided cohorts are dropped

    def test_cohorts_are_kept_apart_by_prompt_and_task_index(self, gym_servers: RunningServers):
        bodies = [
            row("GOOD", prompt="P"),
            row("BAD", prompt="Q"),
            row("BAD", prompt="P"),
            row("GOOD", prompt="Q"),
            # The same input under two task indices ("0" and 0 are the same index): two cohorts.
            row("OKAY", prompt="P", _ng_task_index="0"),
            row("GOOD", prompt="P", _ng_task_index=1),
            row("BAD", prompt="P", _ng_task_index=0),
            row("OKAY", prompt="P", _ng_task_index=1),
        ]
        verdicts = [r.json() for r in concurrently(gym_servers, "pairs", bodies)]
        assert [v["reward"] for v in verdicts] == [5.0, 1.0, 1.0, 5.0, 3.0, 5.0, 1.0, 3.0]
        assert all(v["cohort_size"] == 2 and v["num_comparisons"] == 2 for v in verdicts)  # circular of 2: both orders
        assert gym_servers.servers["pairs"].cohorts == {}

    def test_a_cohort_that_times_out_compares_what_arrived(self, gym_servers: RunningServers):
        verdicts = [r.json() for r in concurrently(gym_servers, "short", [row("GOOD"), row("BAD")])]
        assert [v["reward"] for v in verdicts] == [5.0, 1.0]
        assert all(v["cohort_complete"] is False and v["cohort_size"] == 2 for v in verdicts)
        # A lone rollout gets default_score.
        alone = gym_servers.caller("short").post("/verify", row("GOOD", prompt="alone")).json()
        assert (alone["reward"], alone["cohort_size"], alone["cohort_complete"]) == (3.0, 1, False)
        assert gym_servers.servers["short"].cohorts == {}

    def test_a_cohort_that_times_out_can_fail_its_rollouts(self, gym_servers: RunningServers):
        replies = concurrently(gym_servers, "short_fail", [row("GOOD"), row("BAD")])
        for reply in replies:
            assert reply.status == 504 and reply.json()["error"]["type"] == "cohort_timeout", reply.text
        assert gym_servers.servers["short_fail"].cohorts == {}

    def test_open_cohorts_are_capped(self, gym_servers: RunningServers):
        server = gym_servers.servers["one_cohort"]
        with ThreadPoolExecutor(2) as pool:
            waiting = pool.submit(gym_servers.caller("one_cohort").post, "/verify", row("GOOD", prompt="A"))
            wait_until(lambda: len(server.cohorts) == 1, "one open cohort")
            refused = gym_servers.caller("one_cohort").post("/verify", row("GOOD", prompt="B"))
            assert refused.status == 503 and refused.json()["error"]["type"] == "cohorts_full", refused.text
            done = gym_servers.caller("one_cohort").post("/verify", row("BAD", prompt="A")).json()
            assert waiting.result().json()["reward"] == 5.0 and done["reward"] == 1.0


async def test_three_agent_rollouts_of_one_prompt_form_a_cohort():
    # The whole loop: simple_agent runs three rollouts of one prompt at once (the scripted policy says
    # GOOD, OKAY or BAD by the script in each row's metadata); their verifies wait for each other.
    config = {
        **{name: TestGenrmCompare.instances[name] for name in ("rm", "genrm")},
        "env": env(num_rollouts_per_prompt=3),
        "policy": {"plugin": "scripted"},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "env"},
    }
    manager = plugin_manager(*PLUGINS, *first_party("simple_agent"))
    with running_servers(config, plugins=manager) as running:
        async with ServerClient(running) as client:

            def task(answer: str) -> dict[str, Any]:
                metadata = {"scripted_turns": json.dumps([{"text": answer}])}
                return {"responses_create_params": {"input": PROMPT, "metadata": metadata}}

            results = await asyncio.gather(*(client.post("agent", "/run", task(a)) for a in ("OKAY", "BAD", "GOOD")))
    assert [r["reward"] for r in results] == [3.0, 1.0, 5.0]
    assert all(r["cohort_size"] == 3 for r in results)


def test_configs_load():
    from gym_core.config import load_config
    from gym_core.plugins import PluginManager

    servers = PluginManager().servers()
    for path in sorted((PACKAGE / "configs").glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        overrides = [
            f"{name}.{key}=x"
            for name, options in config.items()
            if isinstance(options, dict)
            for key, value in options.items()
            if value == "???"
        ]
        overrides = [o.replace("base_url=x", "base_url=http://127.0.0.1:1/v1") for o in overrides]
        load_config([path], overrides=overrides, env_file=None, server_types=servers)
