"""gym resources server ``equivalence_llm_judge``: open-ended answers graded by an LLM judge against a gold answer."""
