"""spec-tune: the speculation length per batch size, measured, written as vLLM's schedule, and confirmed."""
