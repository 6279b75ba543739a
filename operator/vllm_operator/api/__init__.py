"""The VLLMService API: the frozen pydantic models and their CEL rules, the operator's settings,
the alerts' names, the benchmark history's record types."""
