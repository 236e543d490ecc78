"""The code_gen environment: competitive programming, the model's Python program run against unit tests in gym's sandbox."""
