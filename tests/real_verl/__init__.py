"""A tiny, local verl workload for running the real `python -m verl.trainer.main_ppo` on a machine without GPUs.

Everything is written by the test itself (no hub access): a Qwen2-architecture model with random weights (a few
hundred KB), a word-level tokenizer trained here and saved as a PreTrainedTokenizerFast with a chat template, and a
GSM8K-style parquet in verl's gsm8k preprocessing schema (examples/data_preprocess/gsm8k.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
INSTRUCTION = "Let's think step by step and output the final answer after \"####\"."


def questions(n: int) -> list[tuple[str, str]]:
    """(question, answer) pairs shaped like GSM8K's."""
    out = []
    for i in range(n):
        a, b = 3 + i % 17, 5 + (7 * i) % 23
        out.append((f"Natalia sold {a} clips in April and {b} clips in May. How many clips did she sell altogether?",
                    str(a + b)))
    return out


def write_tokenizer(path: Path) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [q + " " + INSTRUCTION + " #### " + a for q, a in questions(64)]
    corpus += [f"user assistant system {d}" for d in range(100)]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=SPECIALS))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    return fast


def write_model(path: Path) -> Path:
    """A 2-layer Qwen2 with random weights and its tokenizer, saved as a Hugging Face model directory."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    tok = write_tokenizer(path)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=tok.eos_token_id)
    Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path)
    return path


def write_gsm8k_parquet(path: Path, n: int = 32, split: str = "train") -> Path:
    """verl's gsm8k schema as the GPU smoke writes it, with this module's short questions."""
    from benchmarks.gpu_verl.workload import write_parquet

    return write_parquet(path, n, split, ask=questions)


def tiny_job(model: Path, data: Path, batch: int = 4) -> dict[str, Any]:
    """verl overrides of a small GRPO job on the tiny model (one node, as few GPUs as the candidate needs)."""
    return {
        "data.train_files": str(data),
        "data.val_files": str(data),
        "data.train_batch_size": batch,
        "data.max_prompt_length": 64,
        "data.max_response_length": 32,
        "actor_rollout_ref.model.path": str(model),
        "actor_rollout_ref.actor.ppo_mini_batch_size": batch,
        "actor_rollout_ref.rollout.n": 2,
        "actor_rollout_ref.actor.use_kl_loss": False,
        "algorithm.use_kl_in_reward": False,
        # a 2-core machine: verl's TransferQueue actors take 1 logical CPU each (8 storage units by default)
        "ray_kwargs.ray_init.num_cpus": 8,
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
    }
