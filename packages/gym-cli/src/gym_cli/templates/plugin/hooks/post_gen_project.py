"""Remove what the chosen kind does not use (runs in the generated package's directory)."""

import shutil
from pathlib import Path

# Only an environment (resources server) ships example tasks.
if "{{ cookiecutter.kind }}" != "resources":
    shutil.rmtree(Path("data"), ignore_errors=True)
