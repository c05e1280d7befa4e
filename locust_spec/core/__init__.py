"""The bottom layer: what every stage shares, importing nothing else of the package: prompts, the run-file
contract (names, rows, error kinds, schemas), the level board, vLLM's speculation schedule format."""
