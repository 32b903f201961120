"""Fixtures of the component tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The environment for an `llmfleet` command: its home (state file, logs) in the test's
    own directory, so a test's fleet is that test's alone."""
    return {**os.environ, "LLMFLEET_HOME": str(tmp_path / "home")}


@pytest.fixture(scope="module")
def guarded_app(ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The guarded fleet (``guarded_fleet.py``), deployed for the module and deleted after."""
    from tests.component.guarded_fleet import deploy_guarded
    from tests.serve_fixtures import delete_app

    deploy_guarded(Path(tmp_path_factory.mktemp("keys")))
    yield
    delete_app()
