#!/usr/bin/env bash
# Calibration campaign, lease 64's third study (issue 23.3), written on the lease when lease64.sh's 1.5B branch ended
# with 960 s of budget left: three more of the H100 1.5B table's configurations on the same host as c-1.5b-h64/h64b
# (micro-batches, full recompute, offload on), so that one host orders five of the table's configurations.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

at qwen2.5-1.5b c-1.5b-h64c 3 250 --extra-steps 0 \
    --enqueue "$MICRO_05" --enqueue "$FULL_RC_05" --enqueue "$OFFLOAD_ON"
stamp "plan done"
