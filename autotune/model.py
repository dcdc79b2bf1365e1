"""Model architectures: the catalog of models users tune for, and Hugging Face config.json loading.

The tuner never loads weights: everything it needs (memory, FLOPs, divisibility) follows from the shapes here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path


class UnknownModelError(ValueError):
    """A model name that is neither in the catalog nor a path to a Hugging Face config."""


@dataclass(frozen=True)
class ModelArch:
    """Shapes of a decoder-only transformer, dense or MoE, as in its config.json."""

    name: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int  # dense MLP width; for MoE models, of the leading dense layers (0 if none)
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    num_experts: int = 0
    moe_top_k: int = 0
    moe_ffn_hidden_size: int = 0
    shared_expert_ffn_hidden_size: int = 0
    first_k_dense_layers: int = 0
    # Multi-head latent attention (DeepSeek-V3); kv_lora_rank == 0 means standard GQA attention.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    hf_architecture: str = ""

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def q_size(self) -> int:
        """Width of the query projection output (heads * head_dim)."""
        if self.is_mla:
            return self.num_attention_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of one of K or V as stored per token."""
        if self.is_mla:
            return self.num_attention_heads * self.v_head_dim
        return self.num_kv_heads * self.head_dim

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_k_dense_layers if self.is_moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def attention_params_per_layer(self) -> int:
        cached = self.__dict__.get("_attention_params")
        if cached is None:
            cached = self.__dict__["_attention_params"] = self._attention_params()
        return cached

    def _attention_params(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            nh = self.num_attention_heads
            q = (h * self.q_lora_rank + self.q_lora_rank * nh * qk) if self.q_lora_rank else h * nh * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * nh * (
                self.qk_nope_head_dim + self.v_head_dim
            )
            return q + kv + nh * self.v_head_dim * h
        bias = (self.q_size + 2 * self.kv_size) if self.qkv_bias else 0
        return h * (self.q_size + 2 * self.kv_size) + self.q_size * h + bias

    def expert_params_per_layer(self) -> int:
        """Routed expert weights of one MoE layer (the part sharded by EP and ETP)."""
        return self.num_experts * 3 * self.hidden_size * self.moe_ffn_hidden_size

    def dense_mlp_params_per_layer(self, moe_layer: bool) -> int:
        """MLP weights that TP shards: the dense MLP, or the shared expert of an MoE layer."""
        width = self.shared_expert_ffn_hidden_size if moe_layer else self.ffn_hidden_size
        return 3 * self.hidden_size * width

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def total_params(self) -> int:
        cached = self.__dict__.get("_total_params")  # estimates ask for it many times per candidate
        if cached is None:
            cached = self.__dict__["_total_params"] = self._count_params()
        return cached

    def _count_params(self) -> int:
        per_dense = self.attention_params_per_layer() + self.dense_mlp_params_per_layer(False)
        per_moe = (
            self.attention_params_per_layer()
            + self.dense_mlp_params_per_layer(True)
            + self.expert_params_per_layer()
            + self.hidden_size * self.num_experts
        )
        norms = 2 * self.hidden_size * self.num_layers + self.hidden_size
        return (
            self.num_dense_layers * per_dense + self.num_moe_layers * per_moe + self.embedding_params() + norms
        )

    def with_layers(self, num_layers: int) -> ModelArch:
        """The same model cut to fewer layers (for probes that do not fit at full depth)."""
        return replace(self, num_layers=num_layers, first_k_dense_layers=min(self.first_k_dense_layers, num_layers))


def _qwen25(name: str, h: int, layers: int, heads: int, kv: int, f: int, vocab: int, pos: int, tie: bool) -> ModelArch:
    return ModelArch(name, h, layers, heads, kv, h // heads, f, vocab, pos, tie, qkv_bias=True,
                     hf_architecture="Qwen2ForCausalLM")


# From the published config.json files (../shared/reference/MODELS.md).
CATALOG: dict[str, ModelArch] = {
    m.name: m
    for m in [
        _qwen25("qwen2.5-0.5b", 896, 24, 14, 2, 4864, 151936, 32768, True),
        _qwen25("qwen2.5-1.5b", 1536, 28, 12, 2, 8960, 151936, 131072, True),
        _qwen25("qwen2.5-3b", 2048, 36, 16, 2, 11008, 151936, 32768, True),
        _qwen25("qwen2.5-7b", 3584, 28, 28, 4, 18944, 152064, 131072, False),
        _qwen25("qwen2.5-14b", 5120, 48, 40, 8, 13824, 152064, 131072, False),
        _qwen25("qwen2.5-32b", 5120, 64, 40, 8, 27648, 152064, 32768, False),
        _qwen25("qwen2.5-72b", 8192, 80, 64, 8, 29568, 152064, 131072, False),
        ModelArch("qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, 40960, qk_norm=True,
                  hf_architecture="Qwen3ForCausalLM"),
        ModelArch("qwen3-14b", 5120, 40, 40, 8, 128, 17408, 151936, 40960, qk_norm=True,
                  hf_architecture="Qwen3ForCausalLM"),
        ModelArch("qwen3-30b-a3b", 2048, 48, 32, 4, 128, 0, 151936, 40960, qk_norm=True, num_experts=128,
                  moe_top_k=8, moe_ffn_hidden_size=768, hf_architecture="Qwen3MoeForCausalLM"),
        ModelArch("qwen3-235b-a22b", 4096, 94, 64, 4, 128, 0, 151936, 40960, qk_norm=True, num_experts=128,
                  moe_top_k=8, moe_ffn_hidden_size=1536, hf_architecture="Qwen3MoeForCausalLM"),
        ModelArch("llama3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256, 131072, hf_architecture="LlamaForCausalLM"),
        ModelArch("llama3.1-70b", 8192, 80, 64, 8, 128, 28672, 128256, 131072, hf_architecture="LlamaForCausalLM"),
        ModelArch("deepseek-v3", 7168, 61, 128, 128, 128, 18432, 129280, 163840, num_experts=256, moe_top_k=8,
                  moe_ffn_hidden_size=2048, shared_expert_ffn_hidden_size=2048, first_k_dense_layers=3,
                  q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                  hf_architecture="DeepseekV3ForCausalLM"),
    ]
}

_ALIASES = {"qwen3-30b": "qwen3-30b-a3b", "qwen3-235b": "qwen3-235b-a22b", "llama-3.1-8b": "llama3.1-8b",
            "llama-3.1-70b": "llama3.1-70b"}


_REQUIRED = ("hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size")


def _hf_int(cfg: dict, key: str, source: str, default: int = 0) -> int:
    """config.json's `key` as a whole number: positive where required, else >= 0 (absent or null: `default`)."""
    value = cfg.get(key)
    if value is None and key not in _REQUIRED:
        return default
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < (1 if key in _REQUIRED else 0):
        need = "a positive integer" if key in _REQUIRED else "a whole number (0 or more)"
        raise UnknownModelError(f"{source}: {key!r} must be {need}, got {json.dumps(value)}; fix the model's "
                                "config.json")
    return int(value)


def from_hf_config(cfg: dict, name: str, source: str | None = None) -> ModelArch:
    """Build a ModelArch from a Hugging Face config.json mapping (Qwen2/Qwen3/Llama, Qwen MoE, DeepSeek-V3).

    `source` (the file, default `name`) names where a bad or missing value is, in the UnknownModelError raised.
    """
    source = source or name
    if not isinstance(cfg, dict):
        raise UnknownModelError(f"{source}: a model config.json must be a JSON object (of hidden_size, "
                                f"num_hidden_layers, ...), got a JSON {_json_kind(cfg)}")
    for key in _REQUIRED:
        if key not in cfg:
            raise UnknownModelError(
                f"{source if source.endswith('config.json') else source + ': config.json'} has no {key!r}; "
                "autotune reads decoder-only configs (hidden_size, num_hidden_layers, num_attention_heads, "
                "vocab_size, ...)")
    h, heads, layers, vocab = (_hf_int(cfg, key, source) for key in _REQUIRED)

    def num(key: str, default: int = 0) -> int:
        return _hf_int(cfg, key, source, default)

    archs = cfg.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else ""
    experts = num("num_experts") or num("n_routed_experts") or num("num_local_experts")
    kv_lora = num("kv_lora_rank")
    model_type = str(cfg.get("model_type") or "")
    return ModelArch(
        name=name,
        hidden_size=h,
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=num("num_key_value_heads") or heads,
        head_dim=num("head_dim") or h // heads,
        ffn_hidden_size=num("intermediate_size"),
        vocab_size=vocab,
        max_position_embeddings=num("max_position_embeddings") or 32768,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        qkv_bias=bool(cfg.get("attention_bias", model_type.startswith("qwen2"))),
        qk_norm=model_type.startswith("qwen3"),
        num_experts=experts,
        moe_top_k=num("num_experts_per_tok") if experts else 0,
        moe_ffn_hidden_size=num("moe_intermediate_size") if experts else 0,
        shared_expert_ffn_hidden_size=(num("shared_expert_intermediate_size")
                                       or num("n_shared_experts") * num("moe_intermediate_size")),
        first_k_dense_layers=num("first_k_dense_replace"),
        q_lora_rank=num("q_lora_rank"),
        kv_lora_rank=kv_lora,
        qk_nope_head_dim=num("qk_nope_head_dim"),
        qk_rope_head_dim=num("qk_rope_head_dim"),
        v_head_dim=num("v_head_dim"),
        hf_architecture=arch,
    )


def _json_kind(value: object) -> str:
    return {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def get_model(name_or_path: str) -> ModelArch:
    """A catalog model by name (case-insensitive), or a Hugging Face model directory / config.json."""
    key = name_or_path.strip().lower()
    key = _ALIASES.get(key, key)
    if key in CATALOG:
        return CATALOG[key]
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            cfg = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise UnknownModelError(f"{path}: not valid JSON ({e}); a model config.json is a JSON object") from None
        return from_hf_config(cfg, path.parent.name.lower() if path.name == "config.json" else path.stem, str(path))
    raise UnknownModelError(
        f"unknown model {name_or_path!r}: not in the catalog and not a path to a Hugging Face model directory "
        f"or config.json. Known models: {', '.join(sorted(CATALOG))} (see `autotune models`)"
    )
