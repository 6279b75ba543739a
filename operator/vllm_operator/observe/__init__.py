"""Step "observe": read-only views of what the children look like now (a reader, never the
writer), and their pure models."""
