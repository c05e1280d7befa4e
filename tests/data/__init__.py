"""Generated inputs for the analysis tests (built by code, not committed as files)."""
