from pathlib import Path

import pytest

from cluster.config import ConfigError, FleetConfig, load_config, parse_config


def test_defaults_are_valid_and_round_trip(tmp_path: Path) -> None:
    cfg = FleetConfig()
    assert cfg.engine.type == "vllm"
    assert cfg.server.host == "127.0.0.1"
    path = tmp_path / "c.yaml"
    path.write_text(cfg.to_yaml())
    assert load_config(path) == cfg


def test_unknown_field_names_its_path() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"engine": {"vllm": {"max_num_seqz": 4}}})
    assert "engine.vllm.max_num_seqz" in str(err.value)


def test_bad_value_names_path_and_reason() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"replicas": {"num_replicas": -1}, "server": {"port": 70000}})
    msg = str(err.value)
    assert "replicas.num_replicas" in msg
    assert "server.port" in msg
    assert "greater than or equal" in msg


def test_a_bare_yaml_null_engine_type_says_to_quote_it(tmp_path: Path) -> None:
    """Found by hand: ``type: null`` is YAML's null, and the error listed 'null' among the
    allowed values; the quoted string is the null engine."""
    path = tmp_path / "fleet.yaml"
    path.write_text("engine:\n  type: null\n")
    with pytest.raises(ConfigError, match=r'engine\.type: .*write type: "null" \(quoted\)'):
        load_config(path)
    path.write_text('engine:\n  type: "null"\n')
    assert load_config(path).engine.type == "null"


def test_autoscaling_bounds_checked() -> None:
    with pytest.raises(ConfigError, match="min_replicas must be <= max_replicas"):
        parse_config({"autoscaling": {"min_replicas": 5, "max_replicas": 2}})


def test_engine_type_is_restricted() -> None:
    with pytest.raises(ConfigError, match=r"engine\.type"):
        parse_config({"engine": {"type": "tgi"}})


def test_unreadable_and_non_mapping_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed")
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(bad)
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_every_field_is_described() -> None:
    def walk(model: type) -> None:
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
            ann = field.annotation
            if isinstance(ann, type) and hasattr(ann, "model_fields"):
                walk(ann)

    walk(FleetConfig)


def test_example_configs_in_deploy_are_valid() -> None:
    root = Path(__file__).resolve().parents[2] / "deploy"
    files = sorted(root.glob("llmfleet*.yaml"))
    assert {f.name for f in files} >= {"llmfleet.example.yaml", "llmfleet.sim16.yaml"}
    for f in files:
        load_config(f)


def test_readme_config_reference_is_current() -> None:
    from cluster.config_doc import markdown

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert markdown() in readme, "regenerate the README table: python -m cluster.config_doc"


def test_up_flags_override_the_config() -> None:
    from cluster.cli import _overrides, build_parser

    args = build_parser().parse_args(
        [
            "up",
            "--engine",
            "sim",
            "--replicas",
            "3",
            "--port",
            "9000",
            "--router",
            "p2c",
            "--autoscale",
            "none",
        ]
    )
    cfg = _overrides(FleetConfig(), args)
    assert (cfg.engine.type, cfg.replicas.num_replicas, cfg.server.port) == ("sim", 3, 9000)
    assert cfg.routing.policy == "p2c"
    assert cfg.autoscaling.enabled is False


def test_autoscaling_params_the_policy_does_not_read_are_rejected() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"autoscaling": {"policy": "ttft-queue", "params": {"headroom": 0.7}}})
    msg = str(err.value)  # a knob the self-tuning policy no longer has
    assert "autoscaling" in msg
    assert "headroom" in msg
    assert "target_attainment" in msg
    with pytest.raises(ConfigError, match="min_replicas"):  # a section field, not a knob
        parse_config({"autoscaling": {"params": {"min_replicas": 2}}})
    with pytest.raises(ConfigError, match="tolerance"):  # utilization's knob, not Ray's rule's
        parse_config({"autoscaling": {"policy": "ongoing-requests", "params": {"tolerance": 0.2}}})
    ok = parse_config({"autoscaling": {"policy": "utilization", "params": {
        "tolerance": 0.2, "downscale_delay_s": 5, "target_utilization": 0.5}}})  # fmt: skip
    assert ok.autoscaling.params["tolerance"] == 0.2


def test_server_modes_set_serve_env_before_ray_starts() -> None:
    from cluster.runtime import direct_ingress_env, http_options, throughput_env

    default = FleetConfig()
    env = throughput_env(default)  # on by default: gRPC handles, user code on the main loop
    assert env["RAY_SERVE_USE_GRPC_BY_DEFAULT"] == "1"
    assert env["RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD"] == "0"
    assert "RAY_SERVE_ENABLE_DIRECT_INGRESS" not in env  # where HTTP is served is separate
    assert direct_ingress_env(default) == {}
    assert http_options(default) == {"host": "127.0.0.1", "port": 8000}
    off = FleetConfig.model_validate(
        {"server": {"throughput_mode": False, "ingress": "direct", "port": 9000}}
    )
    assert throughput_env(off) == {}
    direct = direct_ingress_env(off)
    assert direct["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1"
    assert direct["RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT"] == "9000"
    assert http_options(off)["port"] == 9100  # Serve's proxy moves aside
