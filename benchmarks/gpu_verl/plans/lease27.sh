#!/usr/bin/env bash
# Start-up, lease 27 (issue 24): the kept Ray head (autotune/runners/node/ray_head.py) on a real node, in the session's
# last ~300 s of device time (~600 s held where one GPU counts half). Lease 24's 0.5B study once more, its first
# trial on cold caches as lease 24's #0 (216 s launch to step 1 with a private Ray), now through a head autotune
# started: what the head's start costs, what the trial's "Ray up" stage becomes, and how long the trial's Ray workers
# (vLLM's engine processes among them) take to go after its driver (the runner waits for them before the next
# trial). No extra step: the launch-to-step-1 stages compare with lease 24's as they are.
# Start with AT_MODEL=qwen2.5-0.5b on nvidia-h100-x1.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
# one `autotune run` (one runner, one head): a second trial, joining the head, only if the lease still holds one
at qwen2.5-0.5b c-0.5b-kr 2 300 --keep-ray --extra-steps 0
stamp "plan done"
