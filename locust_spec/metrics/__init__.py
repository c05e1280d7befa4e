"""The server's side: its /metrics text, counter windows over a run, and the client/server cross-check."""
