"""Shared fixtures: the default model (prepared once, no hub) and its tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def model_dir() -> Path:
    from replicas.model_prep import ensure_default_model

    return ensure_default_model()


@pytest.fixture(scope="session")
def tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


# One Ray cluster per test session, shared by every module that deploys an app.
from tests.serve_fixtures import ray_session  # noqa: E402, F401
