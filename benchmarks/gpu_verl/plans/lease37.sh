#!/usr/bin/env bash
# The 3B on a one-GPU H200 as a user's study runs it (issue 23.5): what today's model launches first on the H200 3B
# table's job (dyn12k/96k util0.4, never measured: lease 36's table keeps enqueued trials only) and then what the
# study's corrected model picks next after each measured trial, nothing enqueued. Steps 1-3 only (no extra step): a
# cold 3B trial took ~380 s with one extra step on lease 36's H200, a warm one ~260 s.
# Written for what is left of a session's device time after lease 36 (686 s): the machine that came counted 50% of
# its held time, so LEASE_S=1200 (~1,240 s held, ~620 s of budget): up to four trials. Same 30 payload parts;
# AT_MODEL=qwen2.5-3b on nvidia-h200 with needs_h200.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-3b c-3b-h13 4 240 --extra-steps 0
stamp "plan done"
