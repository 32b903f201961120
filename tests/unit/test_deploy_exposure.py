"""Who can reach a deployed fleet's API (``cluster/deploy/exposure.py``, ``serve_entry``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster.config import parse_config
from cluster.deploy.plan import plan
from cluster.deploy.render import render
from cluster.deploy.serve_config import FILE, render_files


def _cfg(**server: Any) -> Any:
    return parse_config({"engine": {"type": "null"}, "server": server})


def test_kuberay_on_loopback_is_refused_at_render(tmp_path: Path) -> None:
    """Found by hand: the local example config rendered a KubeRay bundle bound to 127.0.0.1,
    which `llmfleet deploy validate` then refused (no Service can reach it)."""
    with pytest.raises(ValueError, match="no Kubernetes Service can reach it"):
        render(_cfg(), "kuberay", tmp_path)
    assert not list(tmp_path.iterdir())  # nothing half-written
    assert render(_cfg(host="0.0.0.0"), "kuberay", tmp_path)  # keys come from its Secret


def test_ray_up_with_an_open_api_is_refused_at_render(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="would refuse to build an open API"):
        render(_cfg(host="0.0.0.0"), "ray-up", tmp_path / "a")
    assert render(_cfg(host="0.0.0.0", api_keys_file="/k.yaml"), "ray-up", tmp_path / "b")
    assert render(_cfg(host="0.0.0.0", allow_unauthenticated=True), "ray-up", tmp_path / "c")
    assert render(_cfg(), "ray-up", tmp_path / "d")  # loopback: reached through a tunnel


@pytest.mark.parametrize("target", ["serve", "ray-up", "kuberay"])
def test_the_front_door_is_refused_on_cluster_targets(target: str, tmp_path: Path) -> None:
    """``server.ingress: resume`` needs the front door `llmfleet up` starts; no target's files
    start one, and Serve's proxy would sit on loopback behind it."""
    cfg = _cfg(host="0.0.0.0", api_keys_file="/k.yaml", ingress="resume")
    with pytest.raises(ValueError, match="no cluster target starts one"):
        render(cfg, target, tmp_path)


def test_plan_warns_of_either_case() -> None:
    def warnings(cfg: Any) -> list[str]:
        return [str(f) for f in plan(cfg).warnings if f.path.startswith("server.")]

    assert "the API answers only on the head itself" in " ".join(warnings(_cfg()))
    assert "refuse to build an open API" in " ".join(warnings(_cfg(host="0.0.0.0")))
    assert warnings(_cfg(host="0.0.0.0", api_keys_file="/k.yaml")) == []


def test_the_built_app_refuses_an_open_api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What `serve deploy` builds on the cluster applies `llmfleet up`'s rule (found reading
    the deploy path: only `up` checked, so a `ray up` fleet on 0.0.0.0 without keys served
    an open API)."""
    import cluster.app
    from cluster import serve_entry

    monkeypatch.setattr(cluster.app, "resolve_model", lambda _path: tmp_path)
    monkeypatch.delenv("LLMFLEET_API_KEYS", raising=False)

    def args(**server: Any) -> dict[str, Any]:
        (app,) = yaml.safe_load(render_files(_cfg(**server))[FILE])["applications"]
        return dict(app["args"])

    with pytest.raises(ValueError, match="not loopback and no API keys are configured"):
        serve_entry.app(args(host="0.0.0.0"))
    assert serve_entry.app(args(host="0.0.0.0", allow_unauthenticated=True))
    monkeypatch.setenv("LLMFLEET_API_KEYS", "keys: []")  # as the kuberay target sets it
    assert serve_entry.app(args(host="0.0.0.0"))
