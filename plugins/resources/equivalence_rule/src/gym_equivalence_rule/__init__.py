"""gym environment ``equivalence_rule``: the whole response compared with a reference string."""
