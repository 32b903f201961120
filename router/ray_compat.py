"""The ingress → replica payload, readable by Ray Serve's own LLM routers too.

Our payload is ``{"request": ForwardedRequest, "view": RequestView}``. Ray's
``PrefixCacheAffinityRouter`` (ray.llm._internal.serve.routing_policies.prefix_aware) looks
for an argument with a ``prompt`` or ``messages`` *attribute* (``hasattr``), normalises it
to a string and matches it character by character in its prefix tree; a plain dict has
neither attribute, so every request would fail with "No request with message or prompt
attribute found". ``RoutedPayload`` is still the same dict (the replica and our router read
it unchanged) and adds a read-only ``prompt``: the prompt's token ids as space-separated
decimal numbers, so Ray's character-level prefix match is a token-level prefix match and
no tokenizer is needed on the routing path.
"""

from __future__ import annotations

from typing import Any

from router.types import RequestView


def prompt_text(token_ids: tuple[int, ...] | list[int]) -> str:
    return " ".join(map(str, token_ids))


class RoutedPayload(dict[str, Any]):
    __slots__ = ()

    @property
    def prompt(self) -> str:
        view = self.get("view")
        if isinstance(view, RequestView):
            return prompt_text(view.token_ids)
        return prompt_text(getattr(self.get("request"), "prompt_token_ids", ()))
