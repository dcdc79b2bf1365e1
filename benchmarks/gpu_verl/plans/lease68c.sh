#!/usr/bin/env bash
# Lease 68's third plan (forty-fifth session): one more configuration of lease68b.sh's one-host 0.5B spread, in the
# same study, with the ~300 s the lease had left.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

at qwen2.5-0.5b c-0.5b-h68s +1 200 --extra-steps 0 --enqueue "$(dyn 8192 16384 0.5)"
stamp "plan done"
