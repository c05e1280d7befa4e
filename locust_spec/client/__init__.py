"""The client: one request's bytes out, its stream in, stamped as it arrives, and timed (pure)."""
