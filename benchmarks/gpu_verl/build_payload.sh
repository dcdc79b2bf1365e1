#!/usr/bin/env bash
# Builds, on this CPU machine, everything the lent GPU machine lacks for a real verl GRPO trial, as parts that
# device calls carry one at a time (README.md beside this file). Needs no device time; ~25 min the first time
# (the Transformer Engine extension compiles on 2 cores), seconds after that (each step is skipped when done).
#
#   benchmarks/gpu_verl/build_payload.sh            all steps; result: .stage1 ... .stageN in the repo root
#
# Steps (folder: $PAYLOAD_DIR, default .payload in the repo root, ignored by git through .git/info/exclude):
#   resolve  pip's resolver on a stub of the device's packages (device_pip_freeze.txt), Python 3.12 manylinux
#   fetch    the wheels of payload.txt (what the device lacks), from the resolver's report or pip download
#   te       transformer_engine_torch 2.12.0 from its sdist against torch 2.11.0+cu130 (a replica venv)
#   site     pip --target site/ --no-deps, the TE extension added, parts the smoke never loads stripped
#   pack     tar | xz and checksum (skipped while payload.tar.xz is newer than site/)
#   parts    split into parts of at most $PART_MB MiB (.stageK/), one per device call (run it alone, STEPS=parts,
#            when the working tree has grown: the device refuses a call over 64 MiB)
#   profile  `autotune profile`'s trace analysis (autotune[profile]: HolisticTraceAnalysis, plotly, pydot) as wheels
#            (wheels/), which `parts` puts in the last part or one of their own; device.sh setup installs every
#            wheel a part carries (the device has pandas, numpy, networkx and narwhals already: device_pip_freeze.txt)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
P=${PAYLOAD_DIR:-$REPO/.payload}
# A call carries 64 MiB with the working tree (its tracked files: 15 MiB on 2026-11-26, the committed real trials
# grow it): a part leaves the tree and 4 MiB (plans and notes not yet committed) beside it. 50 MiB parts fitted
# until the tree passed 14 MiB; then the device refused the first call.
# Files of the index not in the tree (lease_tree.sh out) are not carried: du skips them. xargs runs du once per batch
# of paths (the index passed one batch with lease 62's trials), so every batch's total is summed, not the last one.
tree_mib() { (cd "$REPO" && git ls-files -z | { xargs -0 du -cb 2>/dev/null || true; } \
    | awk '$2 == "total" {s += $1} END {print int(s / 1048576) + 1}'); }
PART_MB=${PART_MB:-$(( 64 - $(tree_mib) - 4 ))}
STAGES=${STAGES_DIR:-$REPO}  # where the .stageK/ folders go: the repo root, where device calls carry them from
# A Python 3.12 that runs (a pyenv shim on PATH may exist and fail): PY312, then PATH, then pyenv's own versions.
find_py312() {
    local c
    for c in ${PY312:-} "$(command -v python3.12 || true)" /root/.pyenv/versions/3.12*/bin/python3.12 \
             /usr/bin/python3.12 /usr/local/bin/python3.12; do
        [ -n "$c" ] && [ -x "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null \
            && { echo "$c"; return; }
    done
    echo "build_payload: needs a Python 3.12 with venv (set PY312=/path/to/python3.12; none of PATH or pyenv runs)" >&2
    exit 1
}
mkdir -p "$P"/{all,te,tewhl,fl,sd}; cd "$P"
# (a linked worktree's .git is a file: git names the exclude file; a tree outside git gets a .git/info of its own)
EXCLUDE=$(cd "$REPO" && git rev-parse --path-format=absolute --git-path info/exclude 2>/dev/null) \
    || EXCLUDE=$REPO/.git/info/exclude
mkdir -p "$(dirname "$EXCLUDE")"; grep -qs '^/.payload/' "$EXCLUDE" || printf '/.payload/\n/.stage*/\n' >> "$EXCLUDE"
export PIP_CONSTRAINT=  # this machine caps torch; the payload is for another one
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_31_x86_64
      --platform manylinux_2_34_x86_64 --platform any)
say() { echo "[build_payload $(date -u +%T)] $*"; }

resolve() {
    [ -f R2.json ] && return
    "$(find_py312)" -m venv stubs
    local sp; sp=$(stubs/bin/python -c 'import site; print(site.getsitepackages()[0])')
    while IFS= read -r l; do
        local n=${l%%==*} v=${l#*==}; [ "$n" = pip ] && continue
        local d="$sp/$(echo "$n" | tr - _)-$v.dist-info"; mkdir -p "$d"
        printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$n" "$v" > "$d/METADATA"; : > "$d/RECORD"
    done < "$HERE/device_pip_freeze.txt"
    # hydra-core needs antlr4-python3-runtime 4.9.3, an sdist only: its wheel first, or the resolver backtracks.
    python3 -m pip download -q --no-deps --no-binary=:all: -d sd antlr4-python3-runtime==4.9.3
    python3 -m pip wheel -q --no-deps -w fl sd/antlr4*
    stubs/bin/python -m pip install -q --dry-run --report R2.json --only-binary=:all: --find-links fl \
        "verl[vllm,mcore]==0.9.1" megatron-core==0.19.2
    say "resolved: $(python3 -c "import json; print(len(json.load(open('R2.json'))['install']))") packages"
}

fetch() {
    python3 - "$HERE/payload.txt" > urls.txt 2> rest.txt <<'PY'
import json, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
want = dict(l.strip().split("==") for l in open(sys.argv[1]) if "==" in l and not l.startswith("#"))
want = {norm(n): v for n, v in want.items()}
got = set()
for item in json.load(open("R2.json"))["install"]:
    n, v = norm(item["metadata"]["name"]), item["metadata"]["version"]
    if want.get(n) == v:
        print(item["download_info"]["url"]); got.add(n)
for n in sorted(set(want) - got):
    print(f"{n}=={want[n]}", file=sys.stderr)
PY
    # The resolver's report holds https:// URLs and, where pip has a local index or find-links, file:// ones.
    grep '^file://' urls.txt | sed 's|^file://||' | python3 -c 'import sys, urllib.parse as u; [print(u.unquote(l.strip())) for l in sys.stdin]' \
        | while IFS= read -r f; do cp -n "$f" all/ || { say "cannot copy $f"; exit 1; }; done
    grep -v '^file://' urls.txt | (cd all && xargs -r -n 4 -P 8 wget -q -nc) || { say "wget failed"; exit 1; }
    local n_want n_got; n_want=$(grep -vc '^#' "$HERE/payload.txt"); n_got=$(ls all | wc -l)
    say "fetched $n_got of $n_want wheels"
    grep -v antlr4 rest.txt > rest2.txt || true
    [ -s rest2.txt ] && python3 -m pip download -q --no-deps "${PLAT[@]}" -d all -r rest2.txt
    cp fl/*.whl all/
    say "fetched: $(ls all | wc -l) wheels, $(du -sh all | cut -f1)"
}

te() {
    ls tewhl/transformer_engine_torch-2.12.0-*.whl >/dev/null 2>&1 && return
    [ -x rep/bin/python ] || { "$(find_py312)" -m venv rep && rep/bin/python -m pip install -q torch==2.11.0 pybind11 \
        ninja setuptools wheel packaging numpy "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-cccl==13.0.*" \
        all/transformer_engine_cu13-2.12.0-*.whl all/transformer_engine-2.12.0-*.whl; }
    [ -d te/transformer_engine_torch-2.12.0 ] || { rep/bin/python -m pip download -q --no-deps \
        --no-build-isolation --no-binary=:all: -d te transformer_engine_torch==2.12.0 \
        && tar xzf te/transformer_engine_torch-2.12.0.tar.gz -C te; }
    local nv=$P/rep/lib/python3.12/site-packages/nvidia
    (cd te/transformer_engine_torch-2.12.0 && CUDA_HOME=$nv/cu13 PATH=$nv/cu13/bin:$P/rep/bin:$PATH \
        NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_BUILD_USE_NVIDIA_WHEELS=1 MAX_JOBS=2 NVTE_NO_LOCAL_VERSION=1 \
        CPLUS_INCLUDE_PATH=$nv/cudnn/include:$nv/nccl/include:$nv/cusparselt/include:$nv/nvshmem/include \
        "$P/rep/bin/python" -m pip wheel --no-deps --no-build-isolation -w "$P/tewhl" . > "$P/te_build.log" 2>&1)
    say "built: $(ls tewhl)"
}

site() {
    rm -rf site
    rep/bin/python -m pip install -q --no-index --no-deps --no-compile --target site all/*.whl
    # pip --target does not merge into an existing package folder: the TE extension is unzipped over site/.
    (cd site && python3 -m zipfile -e "$P"/tewhl/transformer_engine_torch-2.12.0-*.whl .)
    # Never loaded by a dense model on Hopper (FA3 is used on sm90; MoE kernels; Rust tools; Ray's Java/dashboard):
    rm -rf site/vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so site/vllm/_moe_C_stable_libtorch.abi3.so site/vllm/vllm-rs \
        site/vllm/third_party/deep_gemm site/vllm/third_party/fmha_sm100 site/ray/jars site/ray/dashboard/client/build \
        site/xgrammar/lib/libxgrammar.a
    find site -name __pycache__ -type d -prune -exec rm -rf {} +
    say "site: $(du -sh site | cut -f1)"
}

pack() {
    if [ -f payload.tar.xz ] && [ payload.tar.xz -nt site ]; then say "pack: payload.tar.xz is newer than site/"; return; fi
    tar cf - site | xz -6 -T2 > payload.tar.xz
    sha256sum payload.tar.xz > payload.sha256
}

parts() {
    [ "$PART_MB" -ge 1 ] || { say "parts: the working tree leaves no room in a call's 64 MiB: move the committed" \
        "trials out first (benchmarks/gpu_verl/lease_tree.sh out), or set PART_MB"; exit 1; }
    rm -rf parts && mkdir parts && split -b "${PART_MB}M" -d -a 2 payload.tar.xz parts/payload.tar.xz.part
    rm -rf "$STAGES"/.stage*; local k=0
    for f in parts/*; do k=$((k + 1)); mkdir -p "$STAGES/.stage$k"; mv "$f" "$STAGES/.stage$k/"; done
    cp payload.sha256 "$STAGES/.stage$k/"
    # the profile step's wheels: each in the last part where it fits, else in a part of its own; a wheel larger than
    # a part (plotly, 9.7 MiB) in pieces (<wheel>.partNN), which device.sh joins before it installs the wheels
    local w used
    for w in wheels/*.whl; do
        [ -f "$w" ] || continue
        if [ "$(stat -c %s "$w")" -gt $(( PART_MB * 1048576 )) ]; then
            rm -rf pieces && mkdir pieces && split -b "${PART_MB}M" -d -a 2 "$w" "pieces/$(basename "$w").part"
            for f in pieces/*; do k=$((k + 1)); mkdir -p "$STAGES/.stage$k"; mv "$f" "$STAGES/.stage$k/"; done
            rm -rf pieces
            continue
        fi
        used=$(du -cb "$STAGES/.stage$k"/* "$w" | tail -1 | cut -f1)
        [ "$used" -le $(( PART_MB * 1048576 )) ] || { k=$((k + 1)); mkdir -p "$STAGES/.stage$k"; }
        cp "$w" "$STAGES/.stage$k/"
    done
    say "packed: $(du -sh payload.tar.xz | cut -f1) in $k parts of at most ${PART_MB} MiB: .stage1 ... .stage$k"
}

profile() {
    if ls wheels/*.whl > /dev/null 2>&1; then say "profile: $(ls wheels/*.whl | wc -l) wheels already in wheels/"; return; fi
    mkdir -p wheels
    "$(find_py312)" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux2014_x86_64 -d wheels HolisticTraceAnalysis==0.5.0 plotly==7.1.0 pydot==4.0.1 pyparsing==3.3.3
    say "profile: $(ls wheels/*.whl | wc -l) wheels in wheels/ ($(du -sh wheels | cut -f1)), placed by parts"
}

for step in ${STEPS:-resolve fetch te site pack profile parts}; do "$step"; done
