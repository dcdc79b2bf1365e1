#!/usr/bin/env bash
# Lease 75's second plan (written 2026-12-08, fifty-first session): lease74b.sh again, whose lease ran its first trial
# only (480 s of budget). Start it on the warm H100 when lease75.sh's 0.5B spread ends with 400 s or more of lease left
# (`device.sh start lease75b`), or first on a lease too short for the spread. On one host, in a study of its own: the
# H100 0.5B table's replayed first launch (dyn32k/96k at util 0.4) and its best (dyn32k/32k at util 0.4; 84 % of it
# over hosts, 87 % and 100 % where leases 28 and 62 ran both on one host), steps 1-3 only (23.5, 23.3).
set -u
cd /root/smoke
# shellcheck source=campaign.sh
. /root/at_src/benchmarks/gpu_verl/plans/campaign.sh

first_and_best_05b c-0.5b-h75b
host_probe after2
stamp "plan done"
