"""gym's model API in front of an Azure OpenAI deployment."""
