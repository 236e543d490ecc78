"""A gym model server."""
