"""The veRL and OpenRLHF adapters' tests: each runs in its trainer's venv (the root
tests/test_train_venv.py builds them), and is left uncollected where its trainer is not installed
(the training venv), so that no run reports a skip that hides a missing trainer."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# rollout_checks.py, the checks both test modules share (pytest's importlib mode adds no test folder).
sys.path.insert(0, str(Path(__file__).parent))

collect_ignore = [
    name
    for name, module in (("test_verl.py", "verl"), ("test_openrlhf.py", "openrlhf"))
    if importlib.util.find_spec(module) is None
]
