"""The ``string_match`` environment: a free-form answer graded against a reference string."""
