#!/usr/bin/env bash
# A device call carries the working tree and one payload part in 64 MiB. The committed real trials
# (tests/data/real_verl_gpu/, 57 of the tree's 61 MB after lease 40) are of no use on the device, and with them in
# the tree a part can be 4 MiB at most: ~80 staging calls. `out` moves them beside the repository for a lease's
# calls, so that `build_payload.sh` (STEPS=parts) cuts parts of ~55 MiB: 6 calls. `in` moves them back; run it
# before copying the lease's trials in and before any commit (while they are out, git sees them deleted). A plan
# that resumes a committed study (device.sh's AT_RESUME) needs that one database in the tree for its setup call.
#
#   benchmarks/gpu_verl/lease_tree.sh out | in | status
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=tests/data/real_verl_gpu
STASH=${LEASE_STASH:-$(cd .. && pwd)/.lease-stash}
case ${1:-status} in
    out)
        [ -d "$DATA" ] || { echo "lease_tree: $DATA is not in the tree (out already? $STASH)" >&2; exit 1; }
        [ ! -e "$STASH/real_verl_gpu" ] || { echo "lease_tree: $STASH/real_verl_gpu exists: run 'in' first" >&2; exit 1; }
        mkdir -p "$STASH" && mv "$DATA" "$STASH/"
        echo "out: $DATA -> $STASH/real_verl_gpu (run 'lease_tree.sh in' before committing)" ;;
    in)
        [ -d "$STASH/real_verl_gpu" ] || { echo "lease_tree: nothing out in $STASH" >&2; exit 1; }
        [ ! -e "$DATA" ] || { echo "lease_tree: $DATA exists in the tree: move it aside first" >&2; exit 1; }
        mv "$STASH/real_verl_gpu" "$DATA" && rmdir "$STASH" 2> /dev/null || true
        echo "in: $DATA" ;;
    status)
        if [ -d "$DATA" ]; then echo "in: $DATA"; else echo "out: $STASH/real_verl_gpu"; fi ;;
    *) echo "usage: lease_tree.sh out | in | status" >&2; exit 2 ;;
esac
