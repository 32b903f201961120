"""End to end, on the real vLLM engine: an idle engine answers the replica's probe (``ping``)
at once, and when its engine core process dies, ``VLLMEngine.dead()`` says so at once. The
replica relies on both: it gives a dead engine's requests up (the ingress migrates them)
instead of relaying vLLM's in-band "EngineCore encountered an issue" (found by hand), and
fails over an idle engine that stops answering. The fleet paths are in
``tests/component/test_stall_and_drain.py`` (null engines, injected faults)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e]


def test_a_killed_engine_core_is_seen_dead_at_once() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests.e2e.engine_death_probe"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, (out.returncode, out.stderr[-3000:])
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert result["alive"] is None
    assert result["ping_s"] < 2, result  # an idle engine core answers the probe at once
    assert result["dead"] == "the engine core died", result
    assert result["seconds"] < 5, result  # the request's failure and `dead` come together
    assert result["request"].startswith("raised"), result
    assert result["health"].startswith("raised"), result
