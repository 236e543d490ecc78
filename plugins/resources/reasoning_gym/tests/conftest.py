"""The tests import their shared helper module (``reference_answers``) by name: under pytest's
importlib import mode the tests' folder is not on ``sys.path`` by itself."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
