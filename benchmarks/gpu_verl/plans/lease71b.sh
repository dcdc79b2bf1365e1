#!/usr/bin/env bash
# Calibration campaign, lease 71's second plan (issue 23.5), written in the lease (forty-eighth session) when
# lease71.sh had run its four trials with ~600 s of budget left: the H100 1.5B table's replayed first launch
# (dyn12k/96k at util 0.4) warm on the host that ran its best (dyn16k/32k at util 0.5, c-1.5b-h71 #0), so that the two
# ran on one host once. Steps 1-3 only.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

at qwen2.5-1.5b c-1.5b-h71 +1 200 --extra-steps 0 --enqueue "$(dyn 12288 98304 0.4)"
host_probe after2
stamp "plan done"
