#!/usr/bin/env bash
# The 0.5B on a one-GPU H200 as a user's study runs it (issue 23: the H200 0.5B's Spearman 0.63 over ten rows, all
# from the lane nodes of leases 32 and 33; lease 36's one-GPU host took the H200 3B's from 0.45 to 0.77, lease 38's
# the 1.5B's from 0.59 to 0.64). Nothing enqueued: today's model's first launch on the table's job (dyn32k/96k
# util0.4, measured once on a lane), then what the study's corrected model picks next after each measured trial. One
# extra step each (the noise: verl 0.9.1's V1 trainer polls its replay buffer every 2 s, so gen moves in 2 s steps).
# Written for what is left of a session's device time after lease 38 (1,050 s): LEASE_S=1650 where the machine counts
# 50 % (1,200 where it counts 67 %, 900 in full). A 0.5B trial took ~250 s cold, 170-200 s warm with an extra step.
# AT_MODEL=qwen2.5-0.5b on nvidia-h200 with needs_h200. Ran on 41 payload parts of 8 MiB (the tree had grown to 54 MiB;
# stage 41, the wheels, went with a 6 MiB data folder moved out of the tree for that one call), LEASE_S=1400 named on
# the call that staged part 41: the machine counted 67 %.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-0.5b c-0.5b-h16 8 200 --extra-steps 1
stamp "plan done"
