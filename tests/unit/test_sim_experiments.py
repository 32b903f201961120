"""The batching and chunked-prefill experiments reproduce the textbook effects."""

from __future__ import annotations

from experiments.batching import batching as experiments


def test_chunked_prefill_bounds_decode_stall() -> None:
    on, off = experiments.chunked_prefill_experiment(prompt=8192, decoders=4)
    assert on["chunked_prefill"]
    assert not off["chunked_prefill"]
    assert off["decode_itl_max_ms"] > 3 * on["decode_itl_max_ms"]
    assert on["long_prompt_ttft_ms"] > 0
    assert off["long_prompt_ttft_ms"] > 0


def test_continuous_batching_waits_least(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(experiments, "RATES", (4.0,))
    rows = {r["mode"]: r for r in experiments.batching_experiment(60, seed=1)}
    assert rows["continuous"]["mean_queue_wait_ms"] < rows["dynamic"]["mean_queue_wait_ms"]
    assert rows["dynamic"]["mean_queue_wait_ms"] < rows["static"]["mean_queue_wait_ms"]
    assert rows["continuous"]["output_tok_s"] >= rows["static"]["output_tok_s"]
