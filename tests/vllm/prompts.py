"""Chat prompts for the vLLM smoke tests: varied text so each request walks a different greedy path."""

PROMPTS = (
    "Write a license for free software.",
    "Explain how a hash table resizes itself.",
    "def parse(line):\n    fields = line.split(',')\n    return",
    "List the steps to brew a pot of tea.",
)
