"""Fixtures of the component tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment for an `llmfleet` command: its home (state file, logs) in the test's
    own directory, so a test's fleet is that test's alone."""
    return {**os.environ, "LLMFLEET_HOME": str(tmp_path / "home")}
