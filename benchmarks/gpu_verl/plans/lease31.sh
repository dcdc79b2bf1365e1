#!/usr/bin/env bash
# The 0.5B fused table's best once more (issue 23.5): lease 28's #6 (dyn32k/32k util0.4, 10,307.0 tokens/s/GPU) is
# that table's best by a step-3 gen one 2 s poll quantum shorter than the model's first pick (lease 28's #2,
# dyn32k/96k, 8,982.4: 87%, a tie within #6's measured noise, 14%). The same configuration in a fresh study, cold, one
# extra step; the replay table keeps the later trial. Not run on 2026-11-27: the session's last 300 s, on a machine that
# counted its held time in full, hold no trial (~480 s with setup). Start with AT_MODEL=qwen2.5-0.5b on nvidia-h100-x1.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-0.5b c-0.5b-t 1 320 --enqueue "$R1,use_fused_kernels=true,use_dynamic_bsz=true,ppo_max_token_len_per_gpu=32768,log_prob_max_token_len_per_gpu=32768,gpu_memory_utilization=0.4"
stamp "plan done"
