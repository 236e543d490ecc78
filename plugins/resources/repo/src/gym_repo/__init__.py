"""A repository and a terminal in the sandbox: fix a bug so that hidden tests pass."""
