import json

import pytest

from perfstack.errors import InputError, UsageError
from perfstack.estimate import catalog
from perfstack.estimate.config import SUPPORTED, load_config, parse_config


def test_directory_or_file_path(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(catalog.CATALOG["mistral-7b"]))
    a, b = load_config(tmp_path), load_config(tmp_path / "config.json")
    assert a == b and a.sliding_window == 4096 and a.sliding_layers == 32 and a.attention_kind == "GQA"


def test_nonexistent_config_names_the_path(tmp_path):
    with pytest.raises(InputError, match="does not exist") as e:
        load_config(tmp_path / "nope.json")
    assert e.value.exit_code == 2


def test_non_json_config(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{ not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_config(p)


def test_json_that_is_not_an_object(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("[1, 2]")
    with pytest.raises(InputError, match="JSON object"):
        load_config(p)


def test_unknown_model_type_is_named():
    with pytest.raises(InputError, match="model_type 'bert' is not supported") as e:
        parse_config({"model_type": "bert", "hidden_size": 768})
    assert "llama" in e.value.hint


def test_missing_model_type():
    with pytest.raises(InputError, match="'model_type' is missing"):
        parse_config({"hidden_size": 768})


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                   "vocab_size"])
def test_missing_field_is_named(field):
    cfg = dict(catalog.CATALOG["llama-3-8b"])
    del cfg[field]
    with pytest.raises(InputError, match=f"field '{field}' is missing"):
        parse_config(cfg)


def test_malformed_field_is_named():
    cfg = dict(catalog.CATALOG["llama-3-8b"], num_hidden_layers=0)
    with pytest.raises(InputError, match="'num_hidden_layers' must be a positive integer"):
        parse_config(cfg)


def test_gqa_mha_mqa_and_defaults():
    assert catalog.get("llama-2-7b").attention_kind == "MHA"
    assert catalog.get("falcon-7b").attention_kind == "MQA"
    assert catalog.get("llama-3-8b").attention_kind == "GQA"
    assert catalog.get("deepseek-v3").attention_kind == "MLA"
    # older Llama configs omit num_key_value_heads: MHA
    cfg = dict(catalog.CATALOG["llama-2-7b"])
    del cfg["num_key_value_heads"]
    assert parse_config(cfg).n_kv_heads == 32


def test_qwen_sliding_window_off_unless_enabled():
    q = catalog.get("qwen2.5-7b")
    assert q.sliding_window is None
    on = parse_config(dict(catalog.CATALOG["qwen2.5-7b"], use_sliding_window=True, sliding_window=4096,
                           max_window_layers=20))
    assert (on.sliding_window, on.sliding_layers) == (4096, 8)


def test_text_config_is_unwrapped():
    cfg = {"model_type": "llava", "text_config": dict(catalog.CATALOG["llama-3-8b"])}
    assert parse_config(cfg).n_layers == 32


def test_every_supported_type_parses_from_the_catalog_or_a_minimal_config():
    seen = {catalog.get(n).model_type for n in catalog.names()}
    minimal = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=100)
    extra = {"qwen3": dict(head_dim=16), "gemma": {}, "gemma3_text": dict(sliding_window=32, head_dim=16),
             "qwen3_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32),
             "qwen2_moe": dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                               shared_expert_intermediate_size=64)}
    for mt in SUPPORTED:
        if mt in seen:
            continue
        spec = parse_config(dict(minimal, model_type=mt, **extra.get(mt, {})))
        assert spec.n_layers == 2


def test_catalog_unknown_name_suggests():
    with pytest.raises(UsageError, match="neither a config.json path nor a built-in model") as e:
        catalog.get("llama-3-8")
    assert "llama-3-8b" in e.value.hint
