"""gym environment ``xlam_fc``: single-turn function calling scored against expected calls."""
