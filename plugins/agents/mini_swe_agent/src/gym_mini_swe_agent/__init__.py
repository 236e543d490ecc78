"""A gym agent."""
