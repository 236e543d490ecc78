"""gym model server that launches vLLM inside Ray actors (``local_vllm_model``) and serves it through ``vllm_model``."""
