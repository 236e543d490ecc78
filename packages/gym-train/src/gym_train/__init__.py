"""gym's trainer side: a master and model workers (:mod:`gym_train.protocol`), a stream of rollouts
from gym (:mod:`gym_train.stream`), a real model and GRPO on CPU, and the closed loop of ``gym train``
(:mod:`gym_train.loop`).

Nothing is imported here: ``import gym_train`` stays cheap, and torch loads only with the modules
that need it.
"""

__version__ = "0.1.0"
