"""Mutable per-request state inside the simulated engine (hot path: plain slots class)."""

from __future__ import annotations

from collections.abc import Sequence

WAITING, RUNNING, FINISHED = 0, 1, 2


class SimRequest:
    __slots__ = (
        "arrival",
        "block_hashes",
        "blocks",
        "cached_tokens",
        "finish_reason",
        "first_scheduled",
        "first_token_time",
        "max_tokens",
        "num_cached_blocks",
        "num_computed",
        "num_output",
        "num_preemptions",
        "payload",
        "prompt_len",
        "request_id",
        "state",
        "token_ids",
        "token_times",
    )

    def __init__(
        self,
        request_id: str,
        prompt_len: int,
        block_hashes: Sequence[int],
        max_tokens: int,
        arrival: float = 0.0,
        payload: object = None,
        token_ids: list[int] | None = None,
    ) -> None:
        self.request_id = request_id
        self.prompt_len = prompt_len
        self.block_hashes = block_hashes  # chained hashes of the prompt's full blocks
        self.max_tokens = max(1, max_tokens)
        self.arrival = arrival
        self.state = WAITING
        self.num_computed = 0  # tokens whose KV is in the cache (prompt + fed-back outputs)
        self.num_output = 0
        self.blocks: list[int] = []
        self.num_cached_blocks = 0  # leading blocks registered in the prefix cache
        self.cached_tokens = 0  # prompt tokens served by the prefix cache at admission
        self.first_token_time: float | None = None
        self.first_scheduled: float | None = None  # when first admitted (queue wait ends)
        self.finish_reason: str | None = None
        self.token_times: list[float] = []
        self.num_preemptions = 0
        self.payload = payload  # caller's handle (e.g. the streaming queue)
        # Prompt + sampled ids when known (real-time engine): then blocks of generated tokens
        # are hashed and cached too, and ``block_hashes`` must be a list (it grows).
        self.token_ids = token_ids

    @property
    def num_tokens(self) -> int:
        """Tokens the sequence holds: the prompt plus outputs sampled so far."""
        return self.prompt_len + self.num_output

    @property
    def in_prefill(self) -> bool:
        return self.num_computed < self.prompt_len
