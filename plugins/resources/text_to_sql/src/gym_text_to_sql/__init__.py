"""Text-to-SQL without a database: an LLM judge compares the model's query with the gold one (spec §13)."""
