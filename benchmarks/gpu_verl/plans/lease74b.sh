#!/usr/bin/env bash
# Lease 74's second plan (written 2026-12-07, fiftieth session, for the next session): start it on the warm H100 when
# lease74.sh's 0.5B spread ends with 400 s or more of lease left (`device.sh start lease74b`). On the same host, in a
# second study: the H100 0.5B table's replayed first launch (dyn32k/96k at util 0.4) and its best (dyn32k/32k at util
# 0.4; a tie within the measured noise, 84 % of it over hosts, 87 % and 100 % where leases 28 and 62 ran both on one
# host), steps 1-3 only: the first launch beside the best a third time (23.5), and seven configurations of the 0.5B
# on one host (23.3). ~150-200 s a warm 0.5B trial. Started first on a short lease (the host then probed before it).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

first_and_best_05b c-0.5b-h74b
host_probe after2
stamp "plan done"
