"""The GPU smoke's workload, written on the device (nothing comes from a hub): a Hugging Face model directory with
the architecture of a catalog model (default Qwen2.5-0.5B, full depth) and random weights, a byte-level BPE tokenizer
as large as the model's embedding (every id decodes) with Qwen's chat tokens, and a GSM8K-shaped parquet in verl's gsm8k
schema whose prompts have realistic lengths (40-200 words of context before the question).

Why a full-size vocabulary: the logits (tokens x 151,936) are what decides the update's memory on a small model, and
vLLM samples every id of the embedding, so each id must detokenize. Why "\\n" is its own token: verl 0.9.1 checks that
a Qwen tokenizer maps it to one id (verl/utils/tokenizer/continuous_token.py).

Usage: python benchmarks/gpu_verl/workload.py OUTDIR [--model qwen2.5-0.5b] [--rows 512]
Writes OUTDIR/model/ (config.json, model.safetensors, tokenizer files) and OUTDIR/data/train.parquet.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from autotune.model import ModelArch, get_model  # noqa: E402

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Qwen's chat tokens, after the regular ones (Qwen's own tokenizer has 151,643 regular, 22 special).
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
INSTRUCTION = "Let's think step by step and output the final answer after \"####\"."
WORDS = ("Natalia sold clips in April and May How many did she sell altogether the of a to is was for on that with "
         "as at by from this have had are were be been has which their there they would each more than other "
         "about into some could then them these so two three four five six seven eight nine ten user assistant "
         "system answer step think final output after").split()


def hf_config(arch: ModelArch, vocab_size: int, eos: int, pad: int) -> Any:
    """A transformers config of the catalog architecture (Qwen2 family)."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab_size, hidden_size=arch.hidden_size, intermediate_size=arch.ffn_hidden_size,
        num_hidden_layers=arch.num_layers, num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.num_kv_heads, max_position_embeddings=arch.max_position_embeddings,
        tie_word_embeddings=arch.tie_word_embeddings, eos_token_id=eos, pad_token_id=pad, bos_token_id=None,
        rope_theta=1_000_000.0, rms_norm_eps=1e-6, torch_dtype="bfloat16", use_sliding_window=False,
    )


def write_tokenizer(path: Path, n_regular: int) -> Any:
    """A byte-level BPE tokenizer as Qwen2's (its pre-tokenizer and decoder): merges learnt on the prompts' words,
    the vocabulary filled to n_regular decodable tokens, then Qwen's special tokens.

    transformers 5 loads any tokenizer of a `qwen2` model as Qwen2Tokenizer (byte-level BPE from the file's vocab and
    merges), so a tokenizer of another kind would be rebuilt into nonsense; this one reads back as it was written.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    def byte_level(vocab: dict[str, int] | None = None, merges: list[tuple[str, str]] | None = None) -> Tokenizer:
        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges) if vocab is not None else models.BPE())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        return tok

    corpus = [q + " " + INSTRUCTION + " #### " + a for q, a in questions(256)] + [" ".join(WORDS)]
    corpus += [" ".join(str(d) for d in range(1000))]
    learnt = byte_level()
    learnt.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=4000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    model = json.loads(learnt.to_str())["model"]
    vocab = dict(model["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    for i in range(len(vocab), n_regular):  # decodable fillers ("\u0120" is byte-level for a space)
        vocab[f"\u0120w{i}"] = i
    tok = byte_level(vocab, merges)
    tok.add_special_tokens(SPECIALS)  # ids n_regular, +1, +2
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 131072
    fast.save_pretrained(path)
    cfg = path / "tokenizer_config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "tokenizer_class": "Qwen2Tokenizer"}, indent=2))
    return fast


def questions(n: int, seed: int = 0, min_words: int = 40, max_words: int = 200) -> list[tuple[str, str]]:
    """(question, answer) pairs shaped like GSM8K's: a context of known words, then the question."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = 3 + i % 17, 5 + (7 * i) % 23
        context = " ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words)))
        out.append((f"{context} Natalia sold {a} clips in April and {b} clips in May How many clips did she sell "
                    "altogether", str(a + b)))
    return out


def write_parquet(path: Path, n: int, split: str = "train",
                  ask: Callable[[int], list[tuple[str, str]]] | None = None) -> Path:
    """Rows in verl's gsm8k schema: data_source, prompt (chat messages), ability, reward_model, extra_info; `ask`
    makes the (question, answer) pairs (default: realistic lengths)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": q + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": a},
        "extra_info": {"split": split, "index": i, "answer": f"{q} #### {a}", "question": q},
    } for i, (q, a) in enumerate((ask or questions)(n))]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_model(out: Path, arch: ModelArch, n_regular: int | None = None) -> Path:
    import torch
    from transformers import Qwen2ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    # Random weights sample every row of the embedding, padding rows too: each id must decode (vLLM detokenizes).
    tok = write_tokenizer(out, min(n_regular or arch.vocab_size, arch.vocab_size) - len(SPECIALS))
    assert len(tok) <= arch.vocab_size, (len(tok), arch.vocab_size)
    cfg = hf_config(arch, arch.vocab_size, tok.convert_tokens_to_ids("<|im_end|>"),
                    tok.convert_tokens_to_ids("<|endoftext|>"))
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="qwen2.5-0.5b", help="catalog name (a Qwen2-architecture model)")
    ap.add_argument("--rows", type=int, default=512, help="prompts in the parquet (>= batch x steps)")
    ap.add_argument("--vocab", type=int, help="tokens of the tokenizer (default: the model's vocab_size)")
    args = ap.parse_args(argv)
    arch = get_model(args.model)
    if arch.hf_architecture != "Qwen2ForCausalLM":
        ap.error(f"{args.model}: only Qwen2-architecture models are written here")
    model_dir = write_model(args.out / "model", arch, args.vocab)
    data = write_parquet(args.out / "data" / "train.parquet", args.rows)
    print(f"workload: {arch.name} ({arch.num_layers} layers, vocab {arch.vocab_size}) random weights in {model_dir}; "
          f"{args.rows} prompts in {data}")


if __name__ == "__main__":
    main()
