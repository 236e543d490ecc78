"""gym_train.verl against veRL 0.9.1's own agent-loop machinery, driving real gym servers: counter
through token_preserving on the embedded model.

The loop is built as veRL's AgentLoopWorker builds one: its entry read from the example agent loop
config file into veRL's registry, then ``hydra.utils.instantiate`` with the worker's arguments (the
trainer config, tokenizer, dataset class...); its output goes through ``AgentLoopOutput.as_dict``, the
tensors veRL trains on. The LLM server client is None: gym's model server generates."""

from __future__ import annotations

import asyncio
import json

import hydra
import pandas
import pytest
from omegaconf import OmegaConf
from rollout_checks import CONFIG, EXAMPLES, check_against_the_row, head_server, tasks, tokenizer  # noqa: E402
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset

from gym_train.agent_rollout import AgentRollout, RolloutFailed
from gym_train.trl.servers import GymServers
from gym_train.verl import AGENT_NAME, GymAgentLoop, verl_row

PROMPT_LENGTH, RESPONSE_LENGTH = 1024, 1024
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


@pytest.fixture(scope="module")
def servers():
    with GymServers.serve(CONFIG) as served:
        yield served


@pytest.fixture(scope="module")
def hf_tokenizer():
    return tokenizer()


def _trainer_config(response_length: int = RESPONSE_LENGTH):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": PROMPT_LENGTH, "response_length": response_length}},
            "data": {},
        }
    )


def _agent_loop(servers, hf_tokenizer, response_length: int = RESPONSE_LENGTH, **options) -> GymAgentLoop:
    """The loop as AgentLoopWorker builds it; ``servers`` (unless None) given over the config's head_url."""
    for entry in OmegaConf.load(EXAMPLES / "verl_agent_loops.yaml"):
        _agent_loop_registry[entry.name] = entry
    config = _trainer_config(response_length)
    loop = hydra.utils.instantiate(
        config=_agent_loop_registry[AGENT_NAME],
        trainer_config=DictConfigWrap(config=config),
        server_manager=None,
        tokenizer=hf_tokenizer,
        processor=None,
        hf_model_type="llama",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
        **({} if servers is None else {"servers": servers}),
        **options,
    )
    assert isinstance(loop, GymAgentLoop)
    return loop


def _row(task) -> dict:
    """The non-tensor fields veRL's dataset gives a sample (the worker passes them as keyword arguments)."""
    return {
        "raw_prompt": task["responses_create_params"]["input"],
        "data_source": "gym_counter",
        "extra_info": {"gym_task": json.dumps(task)},
        "index": 0,
        "tools_kwargs": {},
    }


def _dataset_samples(tmp_path, hf_tokenizer, n: int) -> list[dict]:
    """Samples of veRL's own RLHFDataset, read from a parquet file of ``verl_row``s: the keyword arguments
    AgentLoopWorker gives ``run`` (the non-tensor fields but ``agent_name``, which picks the loop)."""
    path = tmp_path / "train.parquet"
    pandas.DataFrame([verl_row(task, data_source="counter") for task in tasks(n)]).to_parquet(path)
    dataset = RLHFDataset(
        data_files=[str(path)],
        tokenizer=hf_tokenizer,
        config=OmegaConf.create({"max_prompt_length": PROMPT_LENGTH, "cache_dir": str(tmp_path / "cache")}),
    )
    samples = []
    for index in range(len(dataset)):
        item = dataset[index]
        assert item.pop("agent_name") == AGENT_NAME
        item.pop("dummy_tensor")
        samples.append(item)
    return samples


def test_the_loop_is_registered_by_its_decorator():
    import verl.experimental.agent_loop.agent_loop as agent_loop

    assert agent_loop._agent_loop_registry[AGENT_NAME]["_target_"] == "gym_train.verl.GymAgentLoop"


def test_the_loop_returns_the_gym_rollouts_ids_mask_log_probs_and_reward(servers, hf_tokenizer, tmp_path):
    """Samples from veRL's dataset (verl_row rows), each run by a loop of its own, 3 per task."""
    rollouts: list[AgentRollout] = []
    samples = [sample for sample in _dataset_samples(tmp_path, hf_tokenizer, 3) for _ in range(3)]

    async def run_all():
        loops = [_agent_loop(servers, hf_tokenizer, on_rollout=rollouts.append) for _ in samples]
        return await asyncio.gather(*(loop.run(dict(SAMPLING), **sample) for loop, sample in zip(loops, samples)))

    outputs: list[AgentLoopOutput] = asyncio.run(run_all())
    assert len(rollouts) == len(outputs) == 9
    multi_turn = 0
    for output in outputs:
        (rollout,) = [
            r
            for r in rollouts
            if r.trajectory.prompt_ids == output.prompt_ids and r.trajectory.completion_ids == output.response_ids
        ]
        turns = check_against_the_row(
            rollout.result,
            output.prompt_ids,
            output.response_ids,
            output.response_mask,
            output.response_logprobs,
            output.reward_score,
            hf_tokenizer.decode,
        )
        assert output.num_turns == 2 * turns
        assert output.extra_fields["gym_environment"] == "counter"
        multi_turn += turns > 1
        tensors = output.as_dict()  # what veRL batches and trains on
        assert tensors["prompts"].tolist() == output.prompt_ids
        assert tensors["responses"].tolist() == output.response_ids
        assert tensors["response_mask"].tolist() == output.response_mask
        assert tensors["rollout_log_probs"].tolist() == pytest.approx(output.response_logprobs)
        assert tensors["rm_scores"][-1].item() == output.reward_score
        assert tensors["rm_scores"][:-1].abs().sum().item() == 0
    assert multi_turn >= 1, "no rollout called a tool: nothing multi-turn was checked"


def test_a_response_past_response_length_is_cut_with_its_mask_and_log_probs(servers, hf_tokenizer):
    rollouts: list[AgentRollout] = []
    loop = _agent_loop(servers, hf_tokenizer, response_length=6, on_rollout=rollouts.append)
    output = asyncio.run(loop.run(dict(SAMPLING), **_row(tasks(1)[0])))
    (rollout,) = rollouts
    assert output.response_ids == rollout.trajectory.completion_ids[:6]
    assert output.response_mask == rollout.trajectory.env_mask[:6]
    assert output.response_logprobs == rollout.trajectory.logprobs[:6]
    assert output.reward_score == float(rollout.result["reward"])


def test_a_failed_rollout_is_typed_never_a_reward(servers, hf_tokenizer):
    """A task the environment refuses (no expected_count) fails the sample with its reason; a row
    without a gym task says where to put one."""
    bad = {k: v for k, v in tasks(1)[0].items() if k != "expected_count"}
    loop = _agent_loop(servers, hf_tokenizer, retries=0)
    with pytest.raises(RolloutFailed) as failure:
        asyncio.run(loop.run(dict(SAMPLING), **_row(bad)))
    assert failure.value.agent == "counter_agent"
    with pytest.raises(ValueError, match="extra_info.gym_task"):
        asyncio.run(loop.run(dict(SAMPLING), raw_prompt=[], extra_info={}))


def test_the_loop_finds_a_running_gym_through_gym_head_url(servers, hf_tokenizer, monkeypatch):
    """With the example config's head_url null, each loop connects to the servers $GYM_HEAD_URL's head
    server publishes, as a `gym run` does."""
    rollouts: list[AgentRollout] = []
    with head_server(servers.config) as url:
        monkeypatch.setenv("GYM_HEAD_URL", url)
        loop = _agent_loop(None, hf_tokenizer, on_rollout=rollouts.append)
        output = asyncio.run(loop.run(dict(SAMPLING), **_row(tasks(1)[0])))
    assert loop.servers is not servers
    (rollout,) = rollouts
    assert output.prompt_ids == rollout.trajectory.prompt_ids
    assert output.response_ids == rollout.trajectory.completion_ids
    assert output.reward_score == float(rollout.result["reward"])
