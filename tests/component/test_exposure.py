"""Component: what the fleet exposes. The API and metrics listeners bind only to the
configured host (loopback here), and a Ray client without the cluster's token is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.serve_fixtures import TEST_METRICS_PORT, TEST_PORT

pytestmark = [pytest.mark.component]


def test_api_and_metrics_listen_only_on_the_configured_host(ray_session: None) -> None:
    listening = [
        c
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port in (TEST_PORT, TEST_METRICS_PORT)
    ]
    assert {c.laddr.port for c in listening} == {TEST_PORT, TEST_METRICS_PORT}
    assert all(c.laddr.ip == "127.0.0.1" for c in listening), listening


def _connect(home: Path | None) -> subprocess.CompletedProcess[str]:
    import ray

    gcs = ray.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"}
    env["RAY_AUTH_MODE"] = "token"
    if home is not None:
        env["HOME"] = str(home)  # no ~/.ray/auth_token there
    code = (
        f"import ray; ray.init(address={gcs!r}, log_to_driver=False); "
        "print('CONNECTED', ray.cluster_resources().get('CPU'))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )


def test_ray_client_without_the_token_is_refused(ray_session: None, tmp_path: Path) -> None:
    refused = _connect(tmp_path)
    assert refused.returncode != 0
    assert "CONNECTED" not in refused.stdout
    allowed = _connect(None)  # the same client with the token connects: the refusal is auth
    assert "CONNECTED" in allowed.stdout, allowed.stderr[-2000:]
