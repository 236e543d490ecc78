"""The ``arc_agi`` environment: an ARC-AGI puzzle's test output grid, graded by exact match."""
