"""gym_train.openrlhf against OpenRLHF 0.11.2's own agent interface (installed without its CUDA-only
dependencies), driving real gym servers: counter through token_preserving on the embedded model.

What OpenRLHF hands ``execute`` beyond its own classes is vLLM's: ``sampling_params`` is a stand-in with
vLLM ``SamplingParams``' attribute names (vLLM does not install here) and ``llm_engine`` one that fails
if called: gym's model server generates."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from types import SimpleNamespace

import pytest
from openrlhf.utils.agent import AgentExecutorBase
from rollout_checks import CONFIG, EXAMPLES, check_against_the_row, head_server, tasks, tokenizer  # noqa: E402

from gym_train.agent_rollout import AgentRollout, RolloutFailed
from gym_train.openrlhf import GymAgentExecutor, action_ranges
from gym_train.trl.servers import GymServers


class _NoEngine:
    async def generate(self, *args, **kwargs):
        raise AssertionError("the executor called OpenRLHF's engine: gym's model server generates")


@pytest.fixture(scope="module")
def servers():
    with GymServers.serve(CONFIG) as served:
        yield served


def _load_agent_file():
    """The example agent file, loaded as OpenRLHF loads --train.agent_func_path: its AgentExecutor."""
    spec = importlib.util.spec_from_file_location("agent_module", EXAMPLES / "openrlhf_agent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    return module.AgentExecutor


def test_the_executor_returns_the_gym_rollouts_ids_mask_log_probs_and_reward(servers):
    rollouts: list[AgentRollout] = []
    executor = _load_agent_file()(servers=servers, on_rollout=rollouts.append)
    hf_tokenizer = tokenizer()
    labels = [json.dumps(t) for t in tasks(3) for _ in range(3)]  # as gym export prompts writes gym_task

    async def run_all():
        return await asyncio.gather(
            *(
                executor.execute(
                    prompt=f"prompt {i}",
                    label=label,
                    sampling_params=SimpleNamespace(temperature=1.0, top_p=1.0, max_tokens=40, logprobs=1, seed=i),
                    max_length=1024,
                    hf_tokenizer=hf_tokenizer,
                    llm_engine=_NoEngine(),
                )
                for i, label in enumerate(labels)
            )
        )

    outputs = asyncio.run(run_all())
    assert len(rollouts) == len(outputs) == 9
    multi_turn = 0
    for output in outputs:
        observation = output["observation_tokens"]
        (rollout,) = [r for r in rollouts if r.trajectory.prompt_ids + r.trajectory.completion_ids == observation]
        prompt_length = len(rollout.trajectory.prompt_ids)
        mask = [0] * len(observation)
        for start, end in output["action_ranges"]:
            mask[start:end] = [1] * (end - start)
        assert mask[:prompt_length] == [0] * prompt_length
        assert output["rollout_log_probs"][:prompt_length] == [0.0] * prompt_length
        assert output["reward"] == output["scores"]
        turns = check_against_the_row(
            rollout.result,
            observation[:prompt_length],
            observation[prompt_length:],
            mask[prompt_length:],
            output["rollout_log_probs"][prompt_length:],
            output["reward"],
            hf_tokenizer.decode,
        )
        assert output["extra_logs"] == {"gym_turns": turns}
        multi_turn += turns > 1
    assert multi_turn >= 1, "no rollout called a tool: nothing multi-turn was checked"


def test_without_logprobs_asked_none_come_back(servers):
    executor = GymAgentExecutor(servers=servers)
    output = asyncio.run(
        executor.execute(
            "p",
            tasks(1)[0],
            SimpleNamespace(temperature=1.0, top_p=1.0, max_tokens=8, logprobs=None, seed=0),
            1024,
            None,
            _NoEngine(),
        )
    )
    assert output["rollout_log_probs"] is None
    assert output["action_ranges"] and output["reward"] is not None


def test_a_failed_rollout_is_typed_never_a_reward(servers):
    """A task the environment refuses (no expected_count) fails the sample with its reason."""
    bad = {k: v for k, v in tasks(1)[0].items() if k != "expected_count"}
    executor = GymAgentExecutor(servers=servers, retries=0)
    with pytest.raises(RolloutFailed) as failure:
        asyncio.run(
            executor.execute(
                "p",
                bad,
                SimpleNamespace(temperature=1.0, top_p=1.0, max_tokens=8, logprobs=1, seed=0),
                1024,
                None,
                _NoEngine(),
            )
        )
    assert failure.value.agent == "counter_agent"
    with pytest.raises(ValueError, match="responses_create_params"):
        asyncio.run(executor.execute("p", "{}", SimpleNamespace(), 1024, None, _NoEngine()))


def test_action_ranges_are_the_runs_of_generated_tokens():
    assert action_ranges([1, 1, 0, 0, 1, 0, 1], 10) == [(10, 12), (14, 15), (16, 17)]
    assert action_ranges([0, 0], 3) == []


def test_the_agent_file_finds_a_running_gym_through_gym_head_url(servers, monkeypatch):
    """As OpenRLHF builds it (no arguments), the executor connects to the servers $GYM_HEAD_URL's head
    server publishes, as a `gym run` does, and $GYM_AGENT picks the agent."""
    with head_server(servers.config) as url:
        monkeypatch.setenv("GYM_HEAD_URL", url)
        monkeypatch.setenv("GYM_AGENT", "counter_agent")
        rollouts: list[AgentRollout] = []
        executor = _load_agent_file()()
        executor.on_rollout = rollouts.append
        output = asyncio.run(
            executor.execute(
                "p",
                json.dumps(tasks(1)[0]),
                SimpleNamespace(temperature=1.0, top_p=1.0, max_tokens=16, logprobs=1, seed=0),
                1024,
                None,
                _NoEngine(),
            )
        )
    assert executor.servers is not servers and executor.agent == "counter_agent"
    (rollout,) = rollouts
    assert output["observation_tokens"] == rollout.trajectory.prompt_ids + rollout.trajectory.completion_ids
    assert output["reward"] == float(rollout.result["reward"])
