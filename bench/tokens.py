"""Token sources for synthetic prompts.

A ``TokenSource`` draws prompt token ids from a vocabulary that round-trips exactly:
with a tokenizer, only tokens ``t`` that are a leading-space alphabetic word and satisfy
``encode(decode([t])) == [t]`` are used, so a sequence of them decodes to text that
encodes back to the same ids (the byte-level pre-tokenizer splits at each leading space).
Without a tokenizer (the simulator), ids come from a fixed range ``[FALLBACK_LO, FALLBACK_HI)``.
Blocks keyed by an id (shared prefixes, Mooncake hash_ids) are derived from
``(seed, key)`` only, so equal keys give identical token ids in every request.
"""

from __future__ import annotations

import random
from typing import Any

FALLBACK_LO = 1000
FALLBACK_HI = 30000
MAX_VOCAB_SCAN = 60000


def safe_vocab(tokenizer: Any) -> list[int]:
    vocab: dict[str, int] = tokenizer.get_vocab()
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    out: list[int] = []
    for tid in sorted(vocab.values())[:MAX_VOCAB_SCAN]:
        if tid in special:
            continue
        text = tokenizer.decode([tid])
        word = text[1:]
        if len(text) < 3 or text[0] != " " or not word.isascii() or not word.isalpha():
            continue
        if tokenizer.encode(text, add_special_tokens=False) == [tid]:
            out.append(tid)
    if len(out) < 100:
        raise ValueError("tokenizer has too few round-trip-safe tokens")
    return out


class TokenSource:
    def __init__(self, tokenizer: Any = None, seed: int = 0) -> None:
        self.tokenizer = tokenizer
        self.seed = seed
        self.vocab: list[int] | None = safe_vocab(tokenizer) if tokenizer is not None else None

    def _draw(self, rng: random.Random, n: int) -> list[int]:
        if self.vocab is None:
            return [rng.randrange(FALLBACK_LO, FALLBACK_HI) for _ in range(n)]
        return [self.vocab[rng.randrange(len(self.vocab))] for _ in range(n)]

    def block(self, key: str | int, n: int) -> list[int]:
        """Deterministic tokens for ``key``: same (seed, key, n) → same ids."""
        return self._draw(random.Random(f"{self.seed}/{key}"), n)

    def fresh(self, rng: random.Random, n: int) -> list[int]:
        return self._draw(rng, n)

    def text(self, token_ids: list[int] | tuple[int, ...]) -> str:
        if self.tokenizer is None:
            return "".join(f" w{t}" for t in token_ids)
        return str(self.tokenizer.decode(list(token_ids)))


def load_tokenizer(path: str | None) -> Any:
    """Load a HF tokenizer from a local dir; ``None`` or ``"none"`` → no tokenizer."""
    if path is None or path == "none":
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)
