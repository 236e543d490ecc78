"""``python -m gym_core.serve``: one server process of ``gym run`` (see :mod:`gym_core.serving`)."""

from gym_core.serving import run_forever

if __name__ == "__main__":
    run_forever()
