"""Automatic prefix caching as vLLM V1 does it: prompts share KV blocks by a chained hash of full blocks."""

from __future__ import annotations

from collections import OrderedDict

BLOCK = 16  # vLLM's default KV block size on GPUs


class PrefixCache:
    """LRU set of full prompt blocks, each keyed by the hash of everything up to and including it."""

    def __init__(self, capacity_blocks: int):
        self.capacity = max(0, capacity_blocks)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def admit(self, prompt: list[int]) -> int:
        """Cached prefix length of `prompt` in tokens; its full blocks become cached (most recent)."""
        cached = 0
        still_hitting = True
        h = 0
        blocks = self._blocks
        for start in range(0, len(prompt) - BLOCK + 1, BLOCK):
            h = hash((h, *prompt[start:start + BLOCK]))
            if still_hitting and h in blocks:
                cached += BLOCK
                blocks.move_to_end(h)
                continue
            still_hitting = False
            blocks[h] = None
            if len(blocks) > self.capacity:
                blocks.popitem(last=False)
        # The last prompt token is always computed: its logits give the first output token.
        return min(cached, len(prompt) - 1)
