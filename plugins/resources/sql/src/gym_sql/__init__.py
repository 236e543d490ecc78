"""Text-to-SQL environments scored by execution on SQLite: ``bird_sql`` and ``spider2_lite``."""
