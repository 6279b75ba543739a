"""The VLLMService API: the frozen pydantic models and their CEL rules, resource quantities, the
version-skew filter, the status's schema, the operator's settings, the alerts' names, the
benchmark history's record types."""
