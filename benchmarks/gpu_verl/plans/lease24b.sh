#!/usr/bin/env bash
# Lease 24's last minutes (issue 23): one more warm trial of the 0.5B study, micro-batches of 1/4 without dynamic
# batching, as lease 22's 1.5B trial whose update took 28.4 s where the model said 9.8 s: the same micro-batches at
# another size say whether the miss is a cost per micro-batch or grows with the model.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-0.5b c-0.5b-bc +1 300 \
    --enqueue "$R1,use_fused_kernels=true,use_dynamic_bsz=false,ppo_micro_batch_size_per_gpu=1,log_prob_micro_batch_size_per_gpu=4,gpu_memory_utilization=0.5"
stamp "plan done"
