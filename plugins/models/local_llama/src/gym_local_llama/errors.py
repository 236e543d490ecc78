"""The local engine's errors, in a leaf module that every other module of the plugin imports."""

from __future__ import annotations

__all__ = [
    "EngineClosedError",
    "GenerationCancelled",
    "ModelConversionError",
    "ModelNotFoundError",
    "PromptTooLongError",
]


class ModelNotFoundError(FileNotFoundError):
    """The GGUF weights could not be located."""


class PromptTooLongError(ValueError):
    """The rendered prompt does not fit in the context window."""


class EngineClosedError(RuntimeError):
    """The engine was closed."""


class GenerationCancelled(Exception):
    """A generation was stopped through its cancel event."""


class ModelConversionError(RuntimeError):
    """llama.cpp could not convert the weights to the asked format."""
