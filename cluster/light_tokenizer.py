"""The ingress's tokenizer, without ``transformers``: the Rust ``tokenizers`` library and the
model's Jinja chat template.

The ingress tokenizes only to hash prompt blocks for the prefix-aware router; importing
``transformers`` for that cost the ingress process ~300 MB and seconds of start-up. This
renders the template the way ``transformers`` does (sandboxed Jinja, ``trim_blocks`` and
``lstrip_blocks``, ``bos_token``/``eos_token``/``raise_exception`` in scope) and encodes the
result without adding special tokens, as ``apply_chat_template(tokenize=True)`` does; a unit
test holds it to ``transformers`` on the default model. A model without ``tokenizer.json``
falls back to ``transformers``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class TemplateError(ValueError):
    pass


def _raise(message: str) -> None:
    raise TemplateError(message)


def _token_text(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return str(value or "")


class LightTokenizer:
    def __init__(self, model_dir: str | Path) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        d = Path(model_dir)
        self._tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        cfg_path = d / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
        template = cfg.get("chat_template")
        if template is None and (d / "chat_template.jinja").exists():
            template = (d / "chat_template.jinja").read_text()
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        self._template = env.from_string(template) if isinstance(template, str) else None
        self._specials = {
            "bos_token": _token_text(cfg.get("bos_token")),
            "eos_token": _token_text(cfg.get("eos_token")),
        }

    def __len__(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Several texts at once (the Rust library spreads them over threads)."""
        return [list(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tokenize: bool = True,
    ) -> Any:
        if self._template is None:
            raise TemplateError("the model has no chat template")
        text = self._template.render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self._specials
        )
        return self.encode(text) if tokenize else text


def load_tokenizer(model_dir: str | Path) -> Any:
    if (Path(model_dir) / "tokenizer.json").exists():
        return LightTokenizer(model_dir)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))
