#!/usr/bin/env bash
# Lease 52's third trial, started in the same lease after the plan's study stopped at two (its --timeout left no room):
# the 7B pick at util 0.4 with the parameters offloaded, as leases 47 and 50 ran it (this host against theirs).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-7b c-7b-h50 3 420 --extra-steps 1 \
    --enqueue "$(dyn 24576 98304 0.4),$SEL2,$CPU_ADAM05,param_offload=true"
stamp "plan done"
