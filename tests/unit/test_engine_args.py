"""engine.vllm.engine_args: any other vLLM engine argument, checked by vLLM's own parser when
the config loads; keys llmfleet sets itself are refused with the typed field to use."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.config import ConfigError, load_config, parse_config
from replicas import engine_args as ea
from replicas.engine_args import (
    MANAGED,
    EngineArgsError,
    check_engine_args,
    engine_args_argv,
    engine_kwargs_of,
)
from replicas.vllm_settings import VLLMSettings, engine_args, openai_argv

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}


def _errors(args: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(EngineArgsError) as info:
        check_engine_args(args)
    return dict(info.value.errors)


@pytest.mark.parametrize(
    "args",
    [
        {"quantization": "fp8"},
        {"kv_cache_dtype": "fp8"},
        {"speculative_config": NGRAM},
        {"compilation_config": {"mode": 0}},
        {"enable_lora": True, "max_loras": 2},
        {"enable_log_requests": False},
        {"load_format": "safetensors", "cudagraph_capture_sizes": [1, 2, 4]},
    ],
)
def test_valid_arguments_pass_unchanged(args: dict[str, Any]) -> None:
    assert check_engine_args(args) == args


def test_unknown_key_is_named_with_close_matches() -> None:
    errors = _errors({"kv_cahce_dtype": "fp8", "gpu_memory_utilisation": 0.5})
    assert "did you mean kv_cache_dtype" in errors["kv_cahce_dtype"]
    assert "gpu_memory_utilization" in errors["gpu_memory_utilisation"]
    assert "not an argument of vLLM's engine" in _errors({"swap_space": 4})["swap_space"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({"kv_cache_dtype": "fp7"}, "invalid choice: 'fp7'"),
        ({"max_loras": "lots"}, "lots"),
        ({"quantization": "fp7"}, "not a quantization method"),
        ({"enable_lora": "yes"}, "expects true or false"),
        ({"max_loras": True}, "expects a value"),
        ({"cudagraph_capture_sizes": ["a"]}, "invalid int value"),
        ({"speculative_config": {"methd": "ngram"}}, "did you mean method"),
        ({"speculative_config": NGRAM | {"num_speculative_tokens": 0}}, "greater than 0"),
        ({"speculative_config": NGRAM | {"method": "ngramm"}}, "Input should be 'ngram'"),
        ({"compilation_config": {"bogus": 1}}, "bogus"),
        ({"kv_cache_dtype": {"a": object()}}, "not a YAML scalar"),
    ],
)
def test_mistyped_values_are_rejected(args: dict[str, Any], reason: str) -> None:
    ((key, got),) = _errors(args).items()
    assert key == next(iter(args))
    assert reason in got


@pytest.mark.parametrize("key", sorted(MANAGED))
def test_keys_llmfleet_sets_are_refused_with_the_field_to_use(key: str) -> None:
    assert _errors({key: 1})[key] == f"set by llmfleet; {MANAGED[key]}"


def test_aliases_are_named_by_their_own_key() -> None:
    assert (
        "engine.vllm.gpu_memory_utilization"
        in _errors({"device_memory_utilization": 0.5})["device_memory_utilization"]
    )
    assert _errors({"no_enable_lora": True})["no_enable_lora"] == "write enable_lora: false"


def test_without_vllm_only_managed_keys_and_shapes_are_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ea, "_parser", lambda: None)
    monkeypatch.setattr(ea, "_actions", lambda: None)
    assert check_engine_args({"anything_at_all": "x"}) == {"anything_at_all": "x"}
    assert "engine.vllm.max_num_seqs" in _errors({"max_num_seqs": 8})["max_num_seqs"]
    assert engine_args_argv({"enable_lora": False}) == ["--no-enable-lora"]


def test_argv_renders_flags_json_and_lists() -> None:
    argv = engine_args_argv(
        {
            "enable_lora": True,
            "enable_log_requests": False,
            "speculative_config": NGRAM,
            "cudagraph_capture_sizes": [1, 2],
            "kv_cache_dtype": "fp8",
        }
    )
    assert argv == [
        "--enable-lora",
        "--no-enable-log-requests",
        "--speculative-config",
        '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}',
        "--cudagraph-capture-sizes",
        "1",
        "2",
        "--kv-cache-dtype",
        "fp8",
    ]


def test_replica_engine_and_its_openai_layer_get_the_same_values() -> None:
    from replicas.vllm_openai import server_namespace

    extra = {"speculative_config": NGRAM, "kv_cache_dtype": "fp8", "enable_log_requests": True}
    s = VLLMSettings(model_path="/m", engine_args=extra)
    built = engine_args(s, gpu=False)  # the AsyncEngineArgs the replica starts
    served = server_namespace(openai_argv(s, False, {"served_name": "m"}))
    for key, value in engine_kwargs_of(extra).items():
        assert getattr(built, key) == value == getattr(served, key), key
    assert built.speculative_config == NGRAM
    assert built.max_num_seqs == s.max_num_seqs  # typed settings still apply


def test_config_load_names_each_bad_key(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(
        "engine:\n  vllm:\n    engine_args:\n"
        "      kv_cahce_dtype: fp8\n      tensor_parallel_size: 2\n      quantization: fp8\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(cfg)
    msg = str(info.value)
    assert "engine.vllm.engine_args.kv_cahce_dtype: not an argument" in msg
    assert "did you mean kv_cache_dtype" in msg
    assert "engine.vllm.engine_args.tensor_parallel_size: set by llmfleet" in msg
    assert "quantization" not in msg


def test_config_keeps_valid_engine_args() -> None:
    cfg = parse_config({"engine": {"vllm": {"engine_args": {"speculative_config": NGRAM}}}})
    assert cfg.engine.vllm.engine_args == {"speculative_config": NGRAM}
    assert parse_config({}).engine.vllm.engine_args == {}
