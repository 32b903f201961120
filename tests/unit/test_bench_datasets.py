from __future__ import annotations

import itertools
import json
import re
import statistics
from collections import Counter
from pathlib import Path

import pytest

from bench.datasets import build_requests, parse_spec
from bench.tokens import FALLBACK_HI, FALLBACK_LO, TokenSource

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"  # the repository's copy


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_shared_prefix_groups_share_exactly_system_tokens() -> None:
    specs = build_requests("shared-prefix:groups=3,prompts=4,system=40,question=8,output=5")
    assert len(specs) == 12
    assert sorted(s.group for s in specs) == [0] * 4 + [1] * 4 + [2] * 4
    for a in specs:
        assert len(a.prompt_token_ids) == 48
        assert a.output_tokens == 5
        for b in specs:
            if a.index == b.index:
                continue
            shared = _common_prefix(a.prompt_token_ids, b.prompt_token_ids)
            if a.group == b.group:
                assert 40 <= shared < 48  # the system prompt, plus at most a chance match
                assert a.prompt_token_ids[:40] == b.prompt_token_ids[:40]
            else:
                assert shared < 40
                assert a.prompt_token_ids[:40] != b.prompt_token_ids[:40]


def test_shared_prefix_defaults_and_num_requests() -> None:
    assert len(build_requests("shared-prefix")) == 64
    specs = build_requests("shared-prefix", num_requests=10)
    assert len(specs) == 10
    assert [s.index for s in specs] == list(range(10))


def test_datasets_are_seeded_and_fallback_vocab() -> None:
    a = build_requests("random:input=30,output=4", num_requests=5, seed=1)
    b = build_requests("random:input=30,output=4", num_requests=5, seed=1)
    c = build_requests("random:input=30,output=4", num_requests=5, seed=2)
    assert a == b
    assert a != c
    assert all(FALLBACK_LO <= t < FALLBACK_HI for s in a for t in s.prompt_token_ids)


@pytest.mark.parametrize(
    ("dist", "check"),
    [
        ("fixed", lambda v: set(v) == {100}),
        ("uniform", lambda v: min(v) >= 50 and max(v) <= 150 and statistics.pstdev(v) > 20),
        ("normal", lambda v: abs(statistics.fmean(v) - 100) < 8 and 40 < statistics.pstdev(v) < 60),
        (
            "exponential",
            lambda v: abs(statistics.fmean(v) - 100) < 12 and statistics.pstdev(v) > 70,
        ),
    ],
)
def test_length_distributions(dist: str, check) -> None:
    spec = f"random:input=100,input_dist={dist},output=100,output_dist={dist},spread=0.5"
    specs = build_requests(spec, num_requests=400)
    assert check([len(s.prompt_token_ids) for s in specs])
    assert check([s.output_tokens for s in specs])


def test_multi_turn_prompt_extends_previous_turn() -> None:
    specs = build_requests("multi-turn:sessions=2,turns=3,system=20,question=5,output=7")
    assert len(specs) == 6
    by_session: dict[str, list] = {}
    for s in specs:
        by_session.setdefault(s.session_id, []).append(s)
    for turns in by_session.values():
        assert [len(t.prompt_token_ids) for t in turns] == [25, 37, 49]
        for prev, nxt in itertools.pairwise(turns):
            assert nxt.prompt_token_ids[: len(prev.prompt_token_ids)] == prev.prompt_token_ids


def _write_mooncake(path: Path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]},
        {"timestamp": 3000, "input_length": 1200, "output_length": 20, "hash_ids": [0, 1, 2]},
        {"timestamp": 1000, "input_length": 1000, "output_length": 30, "hash_ids": [5, 1]},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_mooncake_equal_hash_ids_equal_blocks(tmp_path: Path) -> None:
    trace = tmp_path / "mc.jsonl"
    _write_mooncake(trace)
    specs = build_requests(f"mooncake:{trace}", length_scale=0.25, time_scale=0.5)
    assert [s.arrival_s for s in specs] == [0.0, 0.5, 1.5]  # sorted by time, ms → s, × 0.5
    first, other, third = specs  # hash_ids [0,1], [5,1], [0,1,2]
    assert [len(s.prompt_token_ids) for s in specs] == [256, 250, 300]
    assert [s.output_tokens for s in specs] == [2, 8, 5]
    assert first.prompt_token_ids == third.prompt_token_ids[:256]  # same ids 0,1 → same blocks
    assert first.prompt_token_ids[:128] != other.prompt_token_ids[:128]  # 0 vs 5
    assert first.prompt_token_ids[128:256] != other.prompt_token_ids[128:250]  # chained prefix


def test_mooncake_block_content_depends_only_on_id() -> None:
    src = TokenSource(None, seed=3)
    assert src.block("mc-1", 64) == TokenSource(None, seed=3).block("mc-1", 64)
    assert src.block("mc-1", 64) != src.block("mc-2", 64)


def test_real_traces_truncate_and_order() -> None:
    mc = build_requests(
        f"mooncake:{TRACES / 'mooncake_synthetic.jsonl'}", num_requests=30, length_scale=1 / 32
    )
    az = build_requests(
        f"azure:{TRACES / 'azure_llm_2023_code.csv'}",
        num_requests=30,
        length_scale=0.1,
        time_scale=2.0,
    )
    for specs in (mc, az):
        times = [s.arrival_s for s in specs]
        assert len(specs) == 30
        assert times[0] == 0.0
        assert times == sorted(times)
    assert az[1].arrival_s == pytest.approx(2 * 0.052, abs=1e-6)  # 18:17:03.97996 → 04.03196


def test_bad_specs_rejected() -> None:
    for bad in ("nope", "random:bogus=1", "mooncake", "shared-prefix:groups"):
        with pytest.raises(
            ValueError,
            match=r"unknown dataset|bad random parameter|needs a path|bad shared-prefix parameter",
        ):
            parse_spec(bad)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("random:input=abc", "input must be a number: 'abc'"),
        ("random:input=-5", "input must be ≥ 0"),
        ("random:spread=nan", "spread must be ≥ 0"),
        ("random:output=inf", "and finite"),
        ("random:input_dist=poisson", "input_dist must be one of fixed, uniform"),
        ("random:n=2.5", "n must be a whole number"),
        ("shared-prefix:groups=0", "groups must be ≥ 1"),
        ("multi-turn:turns=x", "turns must be a whole number"),
        ("azure:/no/such/trace.csv", "azure: no such file: /no/such/trace.csv"),
    ],
)
def test_bad_values_are_refused_before_any_request(spec: str, says: str) -> None:
    """Found by hand: ``llmfleet bench --dataset random:input=abc`` (and a trace path that
    does not exist) failed only after the load generator had connected to the server."""
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_spec(spec)


def test_good_values_still_parse() -> None:
    name, p = parse_spec("random:input=0, input_dist=normal,spread=0.5,n=3")
    assert (name, p["input"], p["input_dist"], p["n"]) == ("random", "0", "normal", "3")


class _FastTokenizer:
    """The model's real tokenizer.json through the ``tokenizers`` library (what
    transformers' fast tokenizer wraps), so the test skips the slow transformers import."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))
        self.all_special_ids: list[int] = []

    def get_vocab(self) -> dict[str, int]:
        return self._tok.get_vocab()

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids


def test_tokenizer_prompts_round_trip_exactly() -> None:
    from replicas.model_prep import default_model_dir

    path = default_model_dir() / "tokenizer.json"
    if not path.exists():
        pytest.skip("default model dir not prepared")
    tok = _FastTokenizer(path)
    specs = build_requests("shared-prefix:groups=2,prompts=2,system=300,question=20", tokenizer=tok)
    src = TokenSource(tok)
    assert len(src.vocab or []) > 10_000
    for s in specs:
        text = src.text(s.prompt_token_ids)
        assert tok.encode(text, add_special_tokens=False) == list(s.prompt_token_ids)
        assert tok.encode(text) == list(s.prompt_token_ids)  # no BOS added either


def test_shared_prefix_zipf_skews_group_popularity() -> None:
    specs = build_requests("shared-prefix:groups=16,prompts=100,system=32,question=4,zipf=1.2")
    counts = Counter(s.group for s in specs)
    assert len(specs) == 1600
    share = counts[0] / len(specs)
    expected = 1.0 / sum((g + 1) ** -1.2 for g in range(16))
    assert abs(share - expected) < 0.04
    assert counts[0] > counts[1] > counts[15]
    # same system prompt within a group, distinct across groups
    first = {s.group: s.prompt_token_ids[:32] for s in specs}
    assert len(set(first.values())) == 16
    with pytest.raises(ValueError, match="zipf"):
        build_requests("shared-prefix:zipf=-1")
