#!/usr/bin/env bash
# Lease 7's remainder (issue 23): the profile could not run (`autotune profile --study` needs an existing database,
# and HolisticTraceAnalysis is not in the payload), so the lease's last minutes go to the 3B study's next pick.
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh
at qwen2.5-3b c-3b 3 420
stamp "plan done"
