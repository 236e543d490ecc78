"""Model interfaces that fail, for the protocol tests (no torch: their workers start fast)."""

from __future__ import annotations

import os
import time
from typing import Any

from gym_train.protocol import ModelInterface


class Flaky(ModelInterface):
    """``inference`` dies (``{"crash": true}``) or stalls (``{"sleep_s": ...}``) on demand."""

    def __init__(self, index: int, n_workers: int):
        self.index = index

    def spec(self, payload: Any) -> Any:
        return {"worker": self.index}

    def inference(self, payload: Any) -> Any:
        if payload.get("crash"):
            os._exit(3)  # a worker that dies mid-request, as a segfault would
        time.sleep(float(payload.get("sleep_s", 0)))
        return []


class Unbuildable(ModelInterface):
    def __init__(self, index: int, n_workers: int):
        raise ValueError("no such checkpoint: /nowhere")
