from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.light_tokenizer import LightTokenizer, TemplateError

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke about caches.\n\nTwo lines."},
    ],
    [{"role": "user", "content": ""}],
]


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("gen", [True, False])
def test_matches_transformers(
    model_dir: Path, tokenizer: Any, messages: list[dict[str, str]], gen: bool
) -> None:
    light = LightTokenizer(model_dir)
    want = tokenizer.apply_chat_template(messages, add_generation_prompt=gen, tokenize=True)
    if isinstance(want, dict) or hasattr(want, "input_ids"):
        want = want["input_ids"]
    assert light.apply_chat_template(messages, add_generation_prompt=gen) == list(want)


def test_encode_and_vocab_match_transformers(model_dir: Path, tokenizer: Any) -> None:
    light = LightTokenizer(model_dir)
    text = "The quick brown fox — jumps over 13 lazy dogs. 日本語"
    assert light.encode(text) == tokenizer.encode(text, add_special_tokens=False)
    assert len(light) == len(tokenizer)


def test_no_template_is_a_clear_error(tmp_path: Path, model_dir: Path) -> None:
    (tmp_path / "tokenizer.json").write_bytes((model_dir / "tokenizer.json").read_bytes())
    light = LightTokenizer(tmp_path)
    with pytest.raises(TemplateError):
        light.apply_chat_template([{"role": "user", "content": "x"}])
