"""``weight_format``: the GGUF converted once into a cache, shared by processes, and batched decoding
on the converted weights still equal to the unbatched engine's."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gym_local_llama.engine import MODEL_NAME, LlamaEngine, default_model_path, model_in_format

OPTIONS = {"n_ctx": 256, "n_threads": 1}
PROMPTS = ["Say hello.", "Write a short poem about the sea.", "What is 2+2?"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


def test_file_is_the_gguf_itself_and_unknown_formats_are_refused(tmp_path):
    source = default_model_path()
    assert model_in_format(source, "file", tmp_path) == source
    with pytest.raises(ValueError, match="weight_format must be one of file, q8_0, q4_0"):
        model_in_format(source, "q3_k", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_concurrent_first_uses_convert_once(cache):
    """Three threads ask at once: one converts (the others wait on the lock), all get the same file,
    nothing half-written is left, and a later call reuses the file without converting again."""
    paths: list = []
    threads = [
        threading.Thread(target=lambda: paths.append(model_in_format(default_model_path(), "q4_0", cache)))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(paths) == 3 and len(set(paths)) == 1
    path = paths[0]
    assert path.parent == cache and path.name.endswith(".q4_0.gguf") and path.stat().st_size > 10_000_000
    assert sorted(p.name for p in cache.iterdir()) == sorted([path.name, path.name + ".lock"])
    written = path.stat().st_mtime_ns
    assert model_in_format(default_model_path(), "q4_0", cache) == path
    assert path.stat().st_mtime_ns == written


async def test_batched_decoding_on_converted_weights_equals_the_unbatched_engine(cache):
    kw = {"temperature": 0, "max_tokens": 16, "return_token_ids": True, "return_logprobs": True}
    messages = [[{"role": "user", "content": p}] for p in PROMPTS]
    with LlamaEngine(**OPTIONS, weight_format="q4_0", cache_dir=cache) as alone:
        assert alone.weights_path.parent == cache and alone.model_name == MODEL_NAME
        want = [alone.generate(m, **kw) for m in messages]
    with LlamaEngine(**OPTIONS, weight_format="q4_0", cache_dir=cache, batch_size=3) as batched:
        got = await asyncio.gather(*(batched.agenerate(m, **kw) for m in messages))
        assert batched.batch_stats.max_sequences == 3
    assert [(g.generation_token_ids, g.generation_log_probs) for g in got] == [
        (g.generation_token_ids, g.generation_log_probs) for g in want
    ]


def test_the_config_offers_the_engines_formats_and_defaults_to_the_file():
    import typing

    import msgspec

    from gym_local_llama.config import LocalLlamaConfig
    from gym_local_llama.engine import WEIGHT_FORMATS

    hints = typing.get_type_hints(LocalLlamaConfig, include_extras=True)
    assert set(typing.get_args(typing.get_args(hints["weight_format"])[0])) == set(WEIGHT_FORMATS)
    assert msgspec.convert({}, LocalLlamaConfig).weight_format == "file"
    with pytest.raises(msgspec.ValidationError, match=r"weight_format"):
        msgspec.convert({"weight_format": "f16"}, LocalLlamaConfig)
