"""CPU profile calibration: the fit recovers known constants; the stored fit is loaded."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from experiments.calibration.fit import Sample, fit_cpu_profile
from experiments.calibration.metrics import (
    Summary,
    compare,
    decode_sample,
    markdown_table,
    prefill_shapes,
    summarize,
)
from experiments.calibration.workload import HeldoutSpec, Trace, decode_grid, heldout
from replicas.sim import profiles
from replicas.sim.cost import BatchShape, CostModel

MODEL = profiles.model("smollm2-135m")
TRUE = {
    "peak_flops": 9.0e10,
    "mem_bandwidth": 2.5e10,
    "compute_eff": 1.0,
    "bw_eff": 1.0,
    "step_overhead_s": 0.012,
    "per_seq_overhead_s": 4e-4,
}


def _grid_samples(fit: dict[str, float], noise: float = 0.0, seed: int = 0) -> list[Sample]:
    cost = CostModel(MODEL, profiles.cpu_profile(fit))
    rng = random.Random(seed)
    samples: list[Sample] = []
    for n in (128, 256, 512, 1024, 1536):
        shapes = prefill_shapes(n, 512)
        t = sum(cost.step_time(s) for s in shapes)
        samples.append(Sample(shapes, t * (1 + rng.gauss(0, noise)), f"prefill {n}"))
    for b in (1, 2, 4, 8, 16, 32):
        for ctx in (129, 513, 1025):
            shape = BatchShape(decode_seqs=b, decode_kv_tokens=b * ctx, sampled=b)
            t = cost.step_time(shape) * (1 + rng.gauss(0, noise))
            samples.append(Sample((shape,), t, f"decode {b} {ctx}"))
    return samples


def test_fit_recovers_constants_from_exact_samples() -> None:
    fit = fit_cpu_profile(_grid_samples(TRUE), MODEL)
    for key, value in TRUE.items():
        assert fit.constants[key] == pytest.approx(value, rel=1e-6), key
    assert fit.rel_rmse < 1e-6
    assert fit.unbound == ()


def test_fit_is_robust_to_measurement_noise() -> None:
    fit = fit_cpu_profile(_grid_samples(TRUE, noise=0.02, seed=3), MODEL)
    assert fit.constants["step_overhead_s"] == pytest.approx(0.012, rel=0.15)
    assert fit.constants["peak_flops"] == pytest.approx(9.0e10, rel=0.1)
    assert 0.005 < fit.rel_rmse < 0.05


def test_fit_reports_a_rate_the_data_never_binds() -> None:
    # Bandwidth so high that every step is compute bound: the data cannot pin it down.
    fit = fit_cpu_profile(_grid_samples({**TRUE, "mem_bandwidth": 1e15}), MODEL)
    assert fit.unbound == ("mem_bandwidth",)
    assert fit.constants["peak_flops"] == pytest.approx(9.0e10, rel=1e-6)
    cost = CostModel(MODEL, profiles.cpu_profile(fit.constants))
    exact = CostModel(MODEL, profiles.cpu_profile({**TRUE, "mem_bandwidth": 1e15}))
    shape = BatchShape(decode_seqs=1, decode_kv_tokens=129, sampled=1)
    assert cost.step_time(shape) == pytest.approx(exact.step_time(shape), rel=1e-6)


def test_fit_needs_enough_samples() -> None:
    with pytest.raises(ValueError, match=r"need at least 4 samples"):
        fit_cpu_profile(_grid_samples(TRUE)[:3], MODEL)


def test_prefill_shapes_chunk_with_growing_context() -> None:
    shapes = prefill_shapes(1200, 512)
    assert [s.prefill_tokens for s in shapes] == [512, 512, 176]
    assert [s.prefill_kv_tokens for s in shapes] == [512, 1024, 1200]
    assert [s.sampled for s in shapes] == [0, 0, 1]
    assert prefill_shapes(1200, 512, cached=1024)[0].prefill_tokens == 176


def test_decode_sample_uses_the_all_decoding_window() -> None:
    # 10 ms steps; b starts two steps late (a long prefill gap before it) and ends with a
    # slow tail after a finished: only gaps while both decode count.
    a = Trace("a", 129, 0.0, [0.05 + 0.01 * k for k in range(10)], [1] * 10)
    b = Trace("b", 129, 0.0, [0.07 + 0.01 * k for k in range(9)] + [0.30], [1] * 10)
    a.times[0] = 0.01  # a's prefill took longer: outside the window anyway
    sample = decode_sample([a, b], 129)
    assert sample is not None
    assert sample.seconds == pytest.approx(0.01)
    assert sample.shapes[0].decode_seqs == 2
    assert 2 * 129 < sample.shapes[0].decode_kv_tokens < 2 * 140


def test_decode_grid_primes_distinct_prompts_then_repeats_them() -> None:
    primers, runs = decode_grid(4, 129, 24, random.Random(0), "d", repeats=2)
    assert [p.max_tokens for p in primers] == [1] * 4
    assert len({p.prompt for p in primers}) == 4
    assert all(len(p.prompt) == 129 for p in primers)
    for run in runs:
        assert [r.prompt for r in run] == [p.prompt for p in primers]
        assert all(r.max_tokens == 24 for r in run)
    assert len({r.request_id for run in runs for r in run}) == 8


def test_cpu_fit_json_loads_and_feeds_the_cpu_profile(tmp_path: Path) -> None:
    path = tmp_path / "cpu_fit.json"
    assert profiles.load_cpu_fit(path) == {}
    path.write_text(json.dumps({"command": "x", "constants": {**TRUE, "unrelated": 1.0}}))
    loaded = profiles.load_cpu_fit(path)
    assert loaded == TRUE
    saved = dict(profiles.CPU_FIT)
    try:
        profiles.set_cpu_fit(loaded)
        hw = profiles.hardware("cpu")
        assert hw.peak_flops == 9.0e10
        assert hw.step_overhead_s == 0.012
        assert hw.default_block_size == 128
    finally:
        profiles.set_cpu_fit(saved)


def test_stored_repo_fit_is_what_profiles_use_and_reproduces_its_grid() -> None:
    stored = profiles.load_cpu_fit()
    if not stored:
        pytest.skip("no cpu_fit.json in the repo")
    hw = profiles.hardware("cpu")
    assert hw.peak_flops == pytest.approx(stored["peak_flops"])
    assert hw.step_overhead_s == pytest.approx(stored["step_overhead_s"])
    doc = json.loads(profiles.CPU_FIT_PATH.read_text())
    cost = CostModel(MODEL, hw)
    errors = []
    for smp in doc["samples"]:
        pred = sum(cost.step_time(BatchShape(**s)) for s in smp["shapes"])
        errors.append((pred - smp["seconds"]) / smp["seconds"])
    assert len(errors) >= 20
    assert (sum(e * e for e in errors) / len(errors)) ** 0.5 < 0.2  # measured on a busy box


def test_heldout_workload_is_seeded_and_shaped() -> None:
    spec = HeldoutSpec(n=200, rate=2.0, seed=1)
    reqs = heldout(spec)
    assert reqs == heldout(spec)
    assert all(r2.offset_s > r1.offset_s for r1, r2 in itertools.pairwise(reqs))
    shared = [r for r in reqs if r.group >= 0]
    assert 0.25 < len(shared) / len(reqs) < 0.55
    assert all(len(r.prompt) >= spec.prefix_len + spec.input_lo for r in shared)
    assert max(r.max_tokens for r in reqs) <= spec.output_cap
    assert reqs[-1].offset_s == pytest.approx(spec.n / spec.rate, rel=0.2)


def test_summary_and_goal_verdicts() -> None:
    t1 = Trace("a", 10, 0.0, [0.1, 0.2, 0.4], [1, 1, 2])
    t2 = Trace("b", 10, 0.5, [0.8, 0.9], [1, 1])
    s = summarize([t1, t2], hits=30, queries=100)
    assert s.ttft_p50_s == pytest.approx(0.2)
    assert t1.itls() == pytest.approx([0.1, 0.1, 0.1])
    assert s.hit_rate == 0.3
    assert s.throughput_tok_s == pytest.approx(6 / 0.9)
    off = Summary(2, 0.23, 0.3, 0.1, 0.1, 0.33, 6 / 0.9)
    rows = {r["metric"]: r for r in compare(s, off)}
    assert rows["ttft_p50_s"]["met"] is False  # +15 %
    assert rows["hit_rate"]["met"] is False  # +3 points
    assert rows["itl_p50_s"]["met"] is True
    assert "| hit_rate | 30.0 % | 33.0 % | +3.0 pts" in markdown_table(list(rows.values()))
