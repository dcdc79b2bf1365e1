"""Imports along verl 0.9.1's Megatron + vLLM GRPO path; prints OK/FAIL per module (no GPU needed)."""
import importlib
import sys
import time
import traceback

MODS = sys.argv[1:] or [
    "torch", "transformers", "tokenizers", "ray", "hydra", "omegaconf", "tensordict", "datasets", "torchdata",
    "transfer_queue", "megatron.core", "mbridge", "transformer_engine", "transformer_engine.pytorch",
    "vllm", "vllm._C", "vllm.vllm_flash_attn", "vllm.v1.engine.async_llm", "vllm.entrypoints.openai.api_server",
    "verl", "verl.trainer.main_ppo", "verl.trainer.ppo.v1", "verl.workers.engine_workers",
    "verl.workers.engine.megatron.transformer_impl", "verl.models.mcore.mbridge", "verl.models.mcore.bridge",
    "verl.workers.rollout.vllm_rollout.vllm_async_server", "verl.experimental.agent_loop",
    "verl.utils.reward_score.gsm8k",
]
bad = 0
for m in MODS:
    t = time.time()
    try:
        importlib.import_module(m)
        print(f"OK   {m} ({time.time()-t:.1f}s)", flush=True)
    except BaseException as e:  # noqa
        bad += 1
        tb = traceback.format_exc().strip().splitlines()
        print(f"FAIL {m}: {type(e).__name__}: {str(e)[:300]}", flush=True)
        print("     " + "\n     ".join(tb[-6:]), flush=True)
print("versions:", {p: getattr(sys.modules.get(p), "__version__", None) for p in
                    ["torch", "transformers", "tokenizers", "ray", "vllm", "verl", "transformer_engine"]})
sys.exit(1 if bad else 0)
