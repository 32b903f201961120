"""A local Prometheus server (Debian's ``prometheus``) for tests, ``llmfleet report`` demos and
benchmarks: started on 127.0.0.1 with a given scrape config, stopped by its own pid.

``PrometheusServer(scrape_targets=[...], rule_files=[...]).start()`` writes a config into a
temporary directory, starts the binary and waits until ``/-/ready``; ``query`` and
``query_range`` call the HTTP API. Nothing here downloads anything: without the binary
``available()`` is False and callers skip with that reason.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from cluster.observe.scrape import prometheus_config

BINARY = "prometheus"
PROMTOOL = "promtool"


def available() -> str | None:
    """None if the binaries are installed, else why not (for a skip message)."""
    missing = [b for b in (BINARY, PROMTOOL) if shutil.which(b) is None]
    if missing:
        return f"{', '.join(missing)} not installed (`make install-prometheus`, Debian's prometheus package)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_config(
    targets: list[str],
    *,
    interval_s: float = 1.0,
    rule_files: list[str] | None = None,
    job: str = "llmfleet",
) -> dict[str, Any]:
    return prometheus_config(
        targets, rule_files=list(rule_files or []), scrape_interval_s=interval_s, job=job
    )


class PrometheusServer:
    def __init__(
        self,
        scrape_targets: list[str],
        *,
        interval_s: float = 1.0,
        rule_files: list[str] | None = None,
        port: int | None = None,
        workdir: str | Path | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._own_dir = workdir is None
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="llmfleet-prom-"))
        self.config = scrape_config(scrape_targets, interval_s=interval_s, rule_files=rule_files)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> PrometheusServer:
        why = available()
        if why:
            raise RuntimeError(why)
        cfg_path = self.dir / "prometheus.yml"
        cfg_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        log = open(self.dir / "prometheus.log", "wb")  # noqa: SIM115  # kept open for the child
        self.proc = subprocess.Popen(
            [
                BINARY,
                f"--config.file={cfg_path}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                "--storage.tsdb.retention.time=1d",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready in {timeout_s} s: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        path = self.dir / "prometheus.log"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)
        self.proc = None
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # ---- HTTP API -----------------------------------------------------------------------
    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        return _data(httpx.get(f"{self.url}/api/v1/query", params=params, timeout=30))

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr, "start": start, "end": end, "step": step}
        return _data(httpx.get(f"{self.url}/api/v1/query_range", params=params, timeout=30))

    def series_names(self) -> set[str]:
        r = httpx.get(f"{self.url}/api/v1/label/__name__/values", timeout=30)
        r.raise_for_status()
        return set(r.json()["data"])

    def wait_for(self, expr: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Poll until ``expr`` returns a non-empty result."""
        deadline = time.monotonic() + timeout_s
        while True:
            out = self.query(expr)
            if out or time.monotonic() > deadline:
                return out
            time.sleep(0.5)


def _data(resp: httpx.Response) -> list[dict[str, Any]]:
    body = resp.json()
    if resp.status_code != 200 or body.get("status") != "success":
        raise ValueError(f"prometheus query failed ({resp.status_code}): {body.get('error', body)}")
    result = body["data"]["result"]
    return result if isinstance(result, list) else [{"value": result}]
