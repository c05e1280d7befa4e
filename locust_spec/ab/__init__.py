"""spec-ab: the A/B sweep's command, its preflight, child processes, progress display and prompt priming."""
