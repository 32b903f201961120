"""What ``plan`` (and the renderers) report about a config: a field path, what is wrong
there, and whether it stops the deploy (error) or only deserves a look (warning)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Finding:
    path: str  # the config field path, e.g. "engine.tensor_parallel_size"
    message: str
    error: bool  # True: plan refuses (exit 1); False: a warning

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"
