"""The reasoning_gym environment: the `reasoning-gym` library's procedural tasks, each scored by
that task's own scorer."""
