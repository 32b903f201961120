"""Roofline cost model of the simulated engine."""

from __future__ import annotations

import itertools

import pytest

from replicas.sim import profiles
from replicas.sim.cost import BatchShape, CostModel


def _cost(model: str, hw: str, tp: int = 1) -> CostModel:
    return CostModel(profiles.model(model), profiles.hardware(hw), tp)


def test_llama8b_h200_decode_near_bandwidth_bound() -> None:
    c = _cost("llama-3-8b", "h200")
    bound = c.model.weight_bytes / c.hw.mem_bandwidth
    assert bound == pytest.approx(3.35e-3, rel=0.02)
    step = c.decode_step(1, 16)
    assert bound <= step <= 1.5 * bound


def test_long_prefill_is_compute_bound() -> None:
    c = _cost("llama-3-8b", "h100")
    m, hw = c.model, c.hw
    tokens = 8192
    shape = BatchShape(
        prefill_tokens=tokens,
        prefill_pairs=tokens * tokens / 2,
        prefill_kv_tokens=tokens,
        sampled=1,
    )
    memory = (m.weight_bytes + tokens * m.kv_bytes_per_token) / (hw.mem_bandwidth * hw.bw_eff)
    step = c.step_time(shape)
    assert step > 5 * memory  # far above the memory roofline
    assert step == pytest.approx(c.prefill_step(tokens), rel=1e-3)
    # per-token prefill cost grows with context (attention)
    assert c.prefill_step(512, context=32_000) > c.prefill_step(512, context=0)


def test_decode_throughput_rises_then_saturates() -> None:
    c = _cost("llama-3-8b", "h100")
    tput = [b / c.decode_step(b, 1024) for b in (1, 2, 8, 32, 128, 512, 2048)]
    assert all(x < y for x, y in itertools.pairwise(tput))
    assert tput[2] > 6 * tput[0]  # memory-bound region: nearly linear
    assert tput[-1] < 1.3 * tput[-2]  # compute-bound region: flat


def test_tensor_parallel_divides_work_and_adds_comm() -> None:
    one, eight = _cost("llama-3-70b", "h100", 4), _cost("llama-3-70b", "h100", 8)
    assert eight.decode_step(1, 1024) < one.decode_step(1, 1024)
    assert eight._comm(64) > 0
    assert _cost("llama-3-8b", "h100")._comm(64) == 0
    assert eight.kv_capacity_tokens() > one.kv_capacity_tokens() > 0


def test_70b_does_not_fit_one_l4() -> None:
    with pytest.raises(ValueError, match=r"does not fit"):
        _cost("llama-3-70b", "l4").kv_capacity_tokens()


def test_unknown_names_rejected() -> None:
    with pytest.raises(ValueError, match=r"unknown hardware"):
        profiles.hardware("tpu")
    with pytest.raises(ValueError, match=r"unknown model"):
        profiles.model("gpt-5")
