"""Exposure rules and the ingress's request bounds that need no server."""

from __future__ import annotations

import pytest

from cluster.app import ingress_replicas
from cluster.config import parse_config
from cluster.guard import check_exposure, usage_tokens
from cluster.request_prep import Limits, bounded_count, check_context
from contracts.http import APIError


def test_open_api_only_on_loopback() -> None:
    check_exposure("127.0.0.1", keys_configured=False, allow_unauthenticated=False)
    check_exposure("::1", keys_configured=False, allow_unauthenticated=False)
    with pytest.raises(ValueError, match="no API keys"):
        check_exposure("0.0.0.0", keys_configured=False, allow_unauthenticated=False)
    check_exposure("0.0.0.0", keys_configured=True, allow_unauthenticated=False)
    check_exposure("10.0.0.5", keys_configured=False, allow_unauthenticated=True)


def test_usage_tokens() -> None:
    assert usage_tokens(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4}}') == 7
    assert usage_tokens(b"{}") is None
    assert usage_tokens(b"not json") is None


class _Chars:
    def encode(self, text: str, **_: object) -> list[int]:
        return [0] * len(text)


def test_huge_prompt_is_judged_on_a_prefix() -> None:
    limits = Limits("m", max_model_len=100, max_tokens_cap=10, default_max_tokens=5, block_size=16)
    assert bounded_count("x" * 50, _Chars(), limits) == 0  # short: full tokenization decides
    n = bounded_count("x" * 10_000_000, _Chars(), limits)
    assert n == 1600  # the window only
    with pytest.raises(APIError) as err:
        check_context("/v1/completions", n, limits, at_least=True)
    assert err.value.code == "context_length_exceeded"
    assert "has more than 1600 tokens" in err.value.message  # a prefix's count, not the whole
    with pytest.raises(APIError) as err:
        check_context("/v1/responses", n, limits)
    assert err.value.param == "input"


def test_ingress_replicas_default() -> None:
    one = parse_config({"replicas": {"num_replicas": 1}, "routing": {"policy": "p2c"}})
    assert ingress_replicas(one) == 1
    many = parse_config({"replicas": {"num_replicas": 4}, "routing": {"policy": "p2c"}})
    assert ingress_replicas(many) == 2
    for policy in ("prefix", "sglang-tree"):  # their routers share what they learn
        shared = parse_config({"replicas": {"num_replicas": 4}, "routing": {"policy": policy}})
        assert ingress_replicas(shared) == 2
    scaled = parse_config({"autoscaling": {"enabled": True, "max_replicas": 3}})
    assert ingress_replicas(scaled) == 2
    apart = parse_config({"replicas": {"num_replicas": 4}, "routing": {"policy": "ray-prefix"}})
    assert ingress_replicas(apart) == 1
    set_ = parse_config({"replicas": {"num_replicas": 4}, "server": {"ingress_replicas": 3}})
    assert ingress_replicas(set_) == 3


async def test_unused_output_tokens_are_refunded(tmp_path: object) -> None:
    from pathlib import Path

    from cluster.guard import Guard
    from cluster.keys import KeyLimits, add_key, bearer_token

    path = Path(str(tmp_path)) / "keys.yaml"
    secret = add_key(path, "k", limits=KeyLimits(tokens_per_min=1000))
    guard = Guard(str(path))
    key = guard.authenticate(f"Bearer {secret}", "/v1/completions")
    assert key is not None
    assert bearer_token(f"Bearer {secret}") == secret
    first = await guard.admit(key, 600)  # prompt + max_tokens
    guard.settle(first, 100)  # the answer's usage: 500 refunded
    second = await guard.admit(key, 600)  # fits only thanks to the refund
    assert second.ticket is not None
    guard.settle(second, None)  # unknown usage (a stream): charged in full
    with pytest.raises(APIError) as err:
        await guard.admit(key, 600)
    assert err.value.status == 429
    assert "retry-after" in err.value.headers
