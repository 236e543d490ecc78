"""gym's model server in front of vLLM OpenAI-compatible servers (``vllm_model``)."""
