"""PrefillBacklog: vLLM's uncached waiting prefill tokens from per-step lookup stats."""

from __future__ import annotations

from replicas.prefill_backlog import MAX_EARLY, PrefillBacklog


def test_whole_prompt_until_looked_up_then_prompt_minus_cached() -> None:
    b = PrefillBacklog()
    b.add("a", 1000)
    b.add("b", 600)
    assert b.tokens == 1600
    b.on_lookups(requests=1, queries=1000, hits=768)  # FCFS: the oldest, "a"
    assert b.tokens == (1000 - 768) + 600
    b.on_lookups(requests=1, queries=600, hits=0)
    assert b.tokens == 232 + 600
    b.on_first_token("a", cached_tokens=768)
    assert b.tokens == 600
    b.remove("a")
    b.on_first_token("b", cached_tokens=0)
    assert b.tokens == 0
    assert b.mismatches == 0


def test_group_lookup_is_exact_in_total_and_per_member_on_first_token() -> None:
    b = PrefillBacklog()
    for rid, n in (("a", 500), ("b", 300), ("c", 200)):
        b.add(rid, n)
    b.on_lookups(requests=2, queries=800, hits=256)  # a and b in one step, hits unknown each
    assert b.tokens == 800 - 256 + 200
    b.on_first_token("b", cached_tokens=256)  # b held all the hits
    assert b.tokens == 500 + 200  # so a is wholly uncached
    b.on_first_token("a", cached_tokens=0)
    assert b.tokens == 200


def test_abort_mismatch_and_reset() -> None:
    b = PrefillBacklog()
    b.add("a", 400)
    b.add("b", 400)
    b.on_lookups(requests=2, queries=800, hits=400)
    b.remove("a")  # aborted before its first token: its pro-rata share leaves
    assert b.tokens == 200
    b.add("c", 100)
    b.on_lookups(requests=1, queries=999, hits=333)  # does not add up: spread, counted
    assert b.mismatches == 1
    assert b.tokens == 200 + (100 - round(333 * 100 / 999))
    b.remove("b")
    b.remove("c")
    assert b.tokens == 0


def test_first_token_before_its_lookup_stats() -> None:
    b = PrefillBacklog()
    b.add("a", 300)
    b.add("b", 500)
    b.on_first_token("a", cached_tokens=128)  # vLLM yielded to us between output and stats
    assert b.tokens == 500
    b.on_lookups(requests=2, queries=800, hits=128 + 256)  # a's lookup and b's
    assert b.tokens == 500 - 256
    assert b.mismatches == 0
    for k in range(MAX_EARLY + 10):  # prefix caching off: lookups never come, memory bounded
        b.add(str(k), 10)
        b.on_first_token(str(k), 0)
    assert len(b._early) == MAX_EARLY
