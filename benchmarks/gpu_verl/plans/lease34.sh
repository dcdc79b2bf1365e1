#!/usr/bin/env bash
# The 3B's selective recompute with half the optimizer on the CPU on a one-GPU H100 host (issue 23): lease 10's c-3b#3
# (rc:sel core_attn dyn8k/96k util0.4 cpu-adam0.5) ran its update 4.7-5.9 s over the model on lease 10's host
# (HOST_MISSES), and ran slow again on lease 33's four-lane H200 node (update 20.8 s at step 2, 31.3 s at step 3, the
# model 16.0 s). One trial on a host of its own says which: the configuration or the hosts. First the host's CPU AdamW
# rate, then the trial, steps 1-3 only. Written for what was left of a session's device time (391 s): start it only on
# a machine that counts half its held time (lease.counts 0.5); lease 30's one 3B trial was done 610 s after the first
# call. Start with AT_MODEL=qwen2.5-3b on nvidia-h100-x1 (LEASE_S=700). Tried 2026-11-27 10:44 with 391 s left: the
# H100 that came counted its held time in full, so it was given back after the first staging call (32 s spent);
# left for a session with fresh device time, where it fits beside other work.
set -u
(cd /root/at_src && python3 -m benchmarks.cpu_adam_rate --out /root/smoke/cpu_adam_rate.json \
    > /root/smoke/cpu_adam_rate.txt 2>&1)
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
stamp "cpu adam: $(tail -1 /root/smoke/cpu_adam_rate.txt)"
C0=$R1,use_fused_kernels=true,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=8192,log_prob_max_token_len_per_gpu=98304
C0=$C0,gpu_memory_utilization=0.4,optimizer_cpu_offload=true,optimizer_offload_fraction=0.5
at qwen2.5-3b c-3b-h10 1 400 --extra-steps 0 --enqueue "$C0,recompute=selective,recompute_modules=core_attn"
stamp "plan done"
