"""my_env: the smallest complete environment, the one the docs show (docs/examples/README.md)."""
