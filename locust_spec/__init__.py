"""locust-spec: measure from the client whether speculative decoding pays on a vLLM deployment."""
