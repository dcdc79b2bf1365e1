#!/usr/bin/env bash
# The 3B on a one-GPU H200 as a user's study runs it (issue 23.5): what today's model launches first on the H200 3B
# table's job (dyn12k/96k util0.4, never measured: lease 36's table keeps enqueued trials only) and then what the
# study's corrected model picks next after that one measured trial, nothing enqueued. Steps 1-3 only (no extra
# step): a cold 3B trial took ~380 s with one extra step on lease 36's H200, a warm one ~260 s.
# Written for what is left of a session's device time after lease 36 (686 s): LEASE_S=900 where the machine counts
# 67% of its held time (~990 s held, ~660 s of budget), LEASE_S=620 (one trial) where it counts in full. Same 30
# payload parts; AT_MODEL=qwen2.5-3b on nvidia-h200 with needs_h200.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-3b c-3b-h13 2 240 --extra-steps 0
stamp "plan done"
