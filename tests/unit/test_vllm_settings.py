"""One translation from our vLLM settings to vLLM's engine arguments, used by the replicas
and by the bare vLLM server the overhead benchmark compares against."""

from __future__ import annotations

import dataclasses

import pytest

from cluster.app import engine_spec
from cluster.config import parse_config
from cluster.engine_settings import VLLMArgs
from replicas.vllm_settings import VLLMSettings, engine_kwargs, server_argv


def test_every_config_field_is_a_setting_the_engine_reads() -> None:
    settings = {f.name for f in dataclasses.fields(VLLMSettings)}
    assert set(VLLMArgs.model_fields) - {"kv_events"} <= settings
    vllm = {"max_num_seqs": 7, "engine_args": {"kv_cache_dtype": "fp8"}}
    spec = engine_spec(parse_config({"engine": {"vllm": vllm}}), "/models/m")
    built = VLLMSettings(**spec["settings"])  # the replica builds exactly this
    assert built.max_num_seqs == 7
    assert built.engine_args == {"kv_cache_dtype": "fp8"}
    assert built.model_path == "/models/m"


@pytest.mark.parametrize("gpu", [False, True])
def test_bare_server_flags_parse_to_the_replicas_engine_arguments(gpu: bool) -> None:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    extra = {
        "kv_cache_dtype": "fp8",
        "speculative_config": {"method": "ngram", "prompt_lookup_max": 4},
    }
    s = VLLMSettings(
        model_path="/m", kv_cache_gib=0.5, max_num_seqs=24, block_size=128, engine_args=extra
    )
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        server_argv(s, gpu, served_name="m", port=8011)
    )
    for key, value in engine_kwargs(s, gpu).items():
        assert getattr(args, key) == value, key
    for key, value in extra.items():  # the pass-through engine arguments too
        assert getattr(args, key) == value, key
    assert (args.host, args.port, args.served_model_name) == ("127.0.0.1", 8011, ["m"])


def test_bare_server_refuses_kv_events() -> None:
    s = VLLMSettings(model_path="/m", kv_events_endpoint="ipc:///tmp/x")
    with pytest.raises(ValueError, match="without KV events"):
        server_argv(s, False, served_name="m", port=8011)


def test_openai_layer_flags_carry_the_model_section() -> None:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    from replicas.vllm_settings import openai_argv

    cfg = parse_config({"model": {"tool_call_parser": "hermes", "tool_strict_level": "parameter"}})
    spec = engine_spec(cfg, "/models/m")
    s = VLLMSettings(**spec["settings"])
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        openai_argv(s, False, spec["openai"])
    )
    assert args.enable_auto_tool_choice
    assert (args.tool_call_parser, args.tool_strict_level) == ("hermes", "parameter")
    assert args.enable_prompt_tokens_details
    assert args.served_model_name == [cfg.model.served_name]
    default = openai_argv(s, False, engine_spec(parse_config({}), "/models/m")["openai"])
    assert "--tool-strict-level" not in default
    assert "--enable-auto-tool-choice" not in default


def test_object_store_weights_are_streamed_by_vllms_loader() -> None:
    s = VLLMSettings(model_path="/models/llama", weights_uri="s3://bucket/llama")
    kw = engine_kwargs(s, gpu=True)
    assert kw["model"] == "s3://bucket/llama"
    assert kw["load_format"] == "runai_streamer"
    assert kw["tokenizer"] == "/models/llama"  # config and tokenizer stay local
    assert "load_format" not in engine_kwargs(VLLMSettings(model_path="/models/llama"), gpu=True)


def test_the_cluster_weights_uri_reaches_the_engine_only_for_object_stores() -> None:
    from cluster.app import engine_spec
    from cluster.config import parse_config

    def spec(uri: str | None) -> dict:
        cfg = parse_config({"cluster": {"weights_uri": uri}})
        return engine_spec(cfg, "/models/x")["settings"]

    assert spec("gs://b/x")["weights_uri"] == "gs://b/x"
    assert "weights_uri" not in spec("/shared/models/x")  # a path: model.path is read there
    assert "weights_uri" not in spec(None)


def test_the_engine_is_named_by_the_served_name() -> None:
    """vLLM labels its own metrics (``model_name``) and names the model in its errors with the
    engine's served name, else the model path (found by hand: every vllm:* series carried
    the replica's filesystem path, and a 400 for an image quoted it to the client)."""
    from replicas.vllm_settings import engine_args

    spec = engine_spec(parse_config({"model": {"served_name": "tiny"}}), "/models/m")
    args = engine_args(VLLMSettings(**spec["settings"]), gpu=False)
    assert args.served_model_name == "tiny"
    assert args.model == "/models/m"
    assert engine_args(VLLMSettings(model_path="/m"), gpu=False).served_model_name is None
