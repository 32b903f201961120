"""`llmfleet up` refuses a taken port before starting Ray (``runtime.check_ports``). Found by
hand: a taken API port ended in a traceback from Serve's proxy actor, a taken metrics port
in Ray's "The current node timed out during startup"."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster.config import FleetConfig
from cluster.runtime import check_ports, http_options


@pytest.fixture
def taken() -> Iterator[int]:
    """A port with a listener on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cfg(**server: object) -> FleetConfig:
    base = {"port": _free_port(), "metrics_export_port": _free_port()}
    return FleetConfig.model_validate({"server": {**base, **server}})


def test_free_ports_pass() -> None:
    check_ports(_cfg())
    check_ports(_cfg(ingress="direct"))


def test_a_port_left_in_time_wait_passes() -> None:
    """A fleet just stopped leaves its connections in TIME_WAIT: no owner, no refusal. (Its
    servers set SO_REUSEADDR, as asyncio's do; Linux lets a port be bound again past a
    TIME_WAIT only when both sockets set it.)"""
    with socket.socket() as srv:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = int(srv.getsockname()[1])
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = srv.accept()
        conn.close()  # the server side closes first: its side goes to TIME_WAIT
        client.close()
    check_ports(_cfg(port=port))


@pytest.mark.parametrize(
    ("field", "says"),
    [("port", "server.port"), ("metrics_export_port", "server.metrics_export_port")],
)
def test_a_taken_port_names_its_setting(taken: int, field: str, says: str) -> None:
    with pytest.raises(ValueError, match=rf"{says}: cannot listen on 127\.0\.0\.1:{taken}"):
        check_ports(_cfg(**{field: taken}))


def test_direct_ingress_also_needs_the_proxy_port(taken: int) -> None:
    check_ports(_cfg(port=taken - 100))  # the proxy's port is not used by the default ingress
    with pytest.raises(ValueError, match="Serve's proxy"):
        check_ports(_cfg(port=taken - 100, ingress="direct"))


def test_the_front_door_puts_serves_proxy_on_loopback_behind_it(taken: int) -> None:
    with pytest.raises(ValueError, match="Serve's proxy, resume"):
        check_ports(_cfg(port=taken - 100, ingress="resume"))
    port = _free_port()
    # only the front door talks to Serve's proxy: on loopback whatever host the API binds
    assert http_options(_cfg(host="0.0.0.0", port=port, ingress="resume")) == {
        "host": "127.0.0.1",
        "port": port + 100,
    }
    assert http_options(_cfg(host="0.0.0.0", port=port)) == {"host": "0.0.0.0", "port": port}


def test_up_on_a_taken_port_says_so_before_starting_ray(taken: int, tmp_path: Path) -> None:
    code = f"from cluster import cli; raise SystemExit(cli.main(['up', '--engine', 'null', '--port', '{taken}']))"
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "LLMFLEET_HOME": str(tmp_path)},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 1, out.stderr[-2000:]
    assert f"server.port: cannot listen on 127.0.0.1:{taken}" in out.stderr
    assert "llmfleet down" in out.stderr
    assert "Traceback" not in out.stderr
    assert time.monotonic() - t0 < 60  # Ray's start alone takes longer than the check
    assert not (tmp_path / "state.json").exists()
