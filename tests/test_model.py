import json

import pytest

from autotune.model import CATALOG, UnknownModelError, get_model


def test_catalog_param_counts_match_published_sizes():
    # MODELS.md: parameter counts cross-checked against the published models.
    expected = {"qwen2.5-0.5b": 0.49, "qwen2.5-7b": 7.62, "qwen2.5-72b": 72.71, "qwen3-8b": 8.19,
                "qwen3-30b-a3b": 30.5, "llama3.1-8b": 8.03, "deepseek-v3": 671.0}
    for name, billions in expected.items():
        assert CATALOG[name].total_params() / 1e9 == pytest.approx(billions, rel=0.01), name


def test_lookup_is_case_insensitive_and_knows_aliases():
    assert get_model("Qwen2.5-7B") is CATALOG["qwen2.5-7b"]
    assert get_model("qwen3-30b") is CATALOG["qwen3-30b-a3b"]


def test_unknown_model_names_the_catalog():
    with pytest.raises(UnknownModelError, match="qwen2.5-7b.*autotune models"):
        get_model("gpt-17")


def test_hf_dense_config_dir(tmp_path):
    cfg = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
           "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
           "intermediate_size": 18944, "vocab_size": 152064, "max_position_embeddings": 131072,
           "tie_word_embeddings": False}
    d = tmp_path / "Qwen2.5-7B-Instruct"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    m = get_model(str(d))
    assert m.name == "qwen2.5-7b-instruct"
    assert m.total_params() == CATALOG["qwen2.5-7b"].total_params()
    assert m.qkv_bias and not m.is_moe


def test_hf_qwen_moe_and_deepseek_configs(tmp_path):
    moe = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
           "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
           "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
           "vocab_size": 151936, "max_position_embeddings": 40960}
    p = tmp_path / "moe.json"
    p.write_text(json.dumps(moe))
    m = get_model(str(p))
    assert m.is_moe and m.num_experts == 128 and m.moe_top_k == 8 and m.qk_norm
    assert m.total_params() / 1e9 == pytest.approx(30.5, rel=0.02)
    ds = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
          "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
          "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
          "num_experts_per_tok": 8, "first_k_dense_replace": 3, "q_lora_rank": 1536, "kv_lora_rank": 512,
          "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
          "max_position_embeddings": 163840}
    p2 = tmp_path / "config.json"
    p2.write_text(json.dumps(ds))
    d = get_model(str(p2))
    assert d.is_mla and d.first_k_dense_layers == 3 and d.shared_expert_ffn_hidden_size == 2048
    assert d.total_params() / 1e9 == pytest.approx(671, rel=0.01)


def test_bad_config_says_what_is_missing(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"hidden_size": 10}))
    with pytest.raises(UnknownModelError, match="num_attention_heads|num_hidden_layers"):
        get_model(str(p))
    p.write_text("{not json")
    with pytest.raises(UnknownModelError, match="not valid JSON"):
        get_model(str(p))
