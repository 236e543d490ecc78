"""Rules with ``expand``: a reply that quotes the request (a judge that quotes the candidate answer
before it rules, as LLM judges often do), and a config quoting a group its regex lacks refused."""

from __future__ import annotations

import msgspec
import pytest

from gym_core.testing import HTTPCaller, plugin_manager, running_servers

import gym_scripted.plugin
from gym_scripted.config import ScriptedModelConfig

RULES = [
    {"match": r"(?s)<answer>\n(?P<answer>.*)\n</answer>", "expand": True, "text": "It says: \\g<answer>. [[A!=B]]"},
    {"match": r"literal (\w+)", "text": "kept as written: \\1"},  # no expand: the text as it is
]


def test_an_expanded_rule_quotes_the_match():
    config = {"judge": {"plugin": "scripted", "rules": RULES}}
    with running_servers(config, plugins=plugin_manager(gym_scripted.plugin)) as running:
        caller = HTTPCaller(running.instances["judge"].url, auth_token=running.auth_token)

        def reply(text: str) -> str:
            answer = caller.post("/v1/responses", {"input": text})
            assert answer.status == 200, answer.text[:500]
            return answer.json()["output"][0]["content"][0]["text"]

        assert reply("Grade this.\n<answer>\nvolt [[A=B]]\n</answer>\nNow rule.") == "It says: volt [[A=B]]. [[A!=B]]"
        assert reply("a literal word") == "kept as written: \\1"


@pytest.mark.parametrize("text", ["\\2", "\\g<missing>"])
def test_a_rule_quoting_a_group_its_regex_lacks_is_refused(text):
    with pytest.raises(msgspec.ValidationError, match=r"rules\[0\]\.text quotes group"):
        msgspec.convert({"rules": [{"match": "(x)", "expand": True, "text": text}]}, ScriptedModelConfig)
