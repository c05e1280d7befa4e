"""Prefix caching: repeated prompts and shared prefixes are not recomputed; capacity is bounded."""

from locust_spec.sim.prefix_cache import BLOCK, PrefixCache


def test_a_repeated_prompt_is_cached_except_its_last_token():
    cache = PrefixCache(100)
    prompt = list(range(5 * BLOCK))
    assert cache.admit(prompt) == 0
    assert cache.admit(prompt) == len(prompt) - 1


def test_a_shared_prefix_hits_only_up_to_the_first_differing_block():
    cache = PrefixCache(100)
    cache.admit(list(range(4 * BLOCK)))
    other = list(range(2 * BLOCK)) + [999] * (2 * BLOCK)
    assert cache.admit(other) == 2 * BLOCK


def test_least_recently_used_blocks_are_evicted_at_capacity():
    cache = PrefixCache(4)
    first = list(range(4 * BLOCK))
    cache.admit(first)
    cache.admit([7] * (4 * BLOCK))
    assert cache.admit(first) == 0
