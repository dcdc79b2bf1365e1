#!/usr/bin/env bash
# Lease 73's second plan (written mid-lease, 2026-12-07, fiftieth session): lease 73's host ran lease73.sh's three 3B
# trials by +927 s (a fast host: steps near the model's), leaving about 700 s. Two more of lease 41's H100 3B spread
# on the same warm host, steps 1-3 only: the H100 3B's single-host ranking gets five configurations (issue 23.3).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

at qwen2.5-3b c-3b-h73b 2 260 --extra-steps 0 \
    --enqueue "$(dyn 16384 98304 0.4),$FULL,$CPU_ADAM1" \
    --enqueue "$(mbs 2 8 0.4),optimizer_offload=true"
host_probe after2
stamp "plan done"
