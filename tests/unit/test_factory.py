import pytest

from replicas.factory import build_engine, light_detokenizer


def test_light_detokenizer_matches_transformers(model_dir, tokenizer) -> None:
    ids = tokenizer.encode("Hello world, this is llmfleet.", add_special_tokens=False)
    assert light_detokenizer(str(model_dir))(ids) == tokenizer.decode(ids)


def test_build_sim_engine_with_text(model_dir) -> None:
    eng = build_engine(
        {
            "type": "sim",
            "settings": {
                "model": "smollm2-135m",
                "hardware": "cpu",
                "tokenizer_path": str(model_dir),
            },
        }
    )
    assert eng.block_size == 16
    assert eng.max_model_len > 0


def test_unknown_engine_type() -> None:
    with pytest.raises(ValueError, match="unknown engine"):
        build_engine({"type": "tgi", "settings": {}})
