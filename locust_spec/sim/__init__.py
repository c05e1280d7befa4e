"""spec-sim: an embedded vLLM-compatible server with speculative decoding, for demos and tests."""
