#!/usr/bin/env bash
# Lease 61's follow-on on the same warm H100 (issue 23.5): lease 61's best, dyn12k/32k at util 0.5 (8,728.3
# tokens/s/GPU, the H100 1.5B table's best run), once more on the same host minutes later: one run's repeat.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-1.5b c-1.5b-h61b 1 200 --extra-steps 0 --enqueue "$(dyn 12288 32768 0.5)"
stamp "plan done"
