#!/usr/bin/env bash
# Does the README's GPU-node install resolve from the package index? Checked without a GPU node: a Python 3.12
# venv holding only empty dist-info stubs of the node's own packages (constraints/gpu-node-base-freeze.txt: torch
# 2.11.0+cu130 and the rest of the tested node), then pip's resolver in --dry-run with a JSON report for
#   pip install -c constraints/gpu-node-torch2.11.txt '.[gpu]'
# and a check that every pinned package it would install has its pinned version and that the node's torch stays.
# The Transformer Engine torch extension (an sdist compiled against the node's torch) is checked to exist on the
# index only. Needs python3.12 and the package index; no GPU. Usage: scripts/check_gpu_install.sh [WORKDIR]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
W=${1:-$(mktemp -d /tmp/gpu-install-XXXX)}
PY312=${PY312:-$(command -v python3.12 || true)}
[ -n "$PY312" ] && "$PY312" -V >/dev/null 2>&1 || PY312=$(ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1)
[ -n "$PY312" ] || { echo "check_gpu_install: python3.12 not found (set PY312=...)"; exit 2; }
CONSTRAINTS=$REPO/constraints/gpu-node-torch2.11.txt
FREEZE=$REPO/constraints/gpu-node-base-freeze.txt
mkdir -p "$W"
[ -x "$W/stubs/bin/python" ] || "$PY312" -m venv "$W/stubs"
SP=$("$W/stubs/bin/python" -c 'import site; print(site.getsitepackages()[0])')
grep -vE '^\s*(#|$)' "$FREEZE" | while IFS= read -r l; do
  n=${l%%==*}; v=${l#*==}; [ "$n" = pip ] && continue
  d="$SP/$(echo "$n" | tr - _)-$v.dist-info"; mkdir -p "$d"
  printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$n" "$v" > "$d/METADATA"; : > "$d/RECORD"
done
"$W/stubs/bin/python" -m pip install --dry-run --quiet --report "$W/report.json" --prefer-binary \
  -c "$CONSTRAINTS" "$REPO[gpu]" 2> "$W/pip.err" || { tail -30 "$W/pip.err"; echo "RESOLVE FAILED"; exit 1; }
python3 - "$W/report.json" "$CONSTRAINTS" <<'PY'
import json, re, sys
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
report = json.load(open(sys.argv[1]))
install = {norm(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
pins = {}
for line in open(sys.argv[2]):
    line = line.split("#")[0].strip()
    if "==" in line:
        n, v = line.split("==")
        pins[norm(n)] = v
bad = [f"{n} {install[n]} (pinned {pins[n]})" for n in install if n in pins and install[n] != pins[n]]
kept = [n for n in ("torch", "torchvision", "torchaudio", "triton") if n in install]
sdists = [i["metadata"]["name"] for i in report["install"]
          if not i["download_info"]["url"].endswith(".whl") and norm(i["metadata"]["name"]) != "autotune"]
print(f"resolved: {len(install)} packages to install over the node's own; pinned and resolved at their pin: "
      f"{sum(1 for n in install if n in pins)}")
for n in ("verl", "vllm", "megatron-core", "mbridge", "transformer-engine", "transformer-engine-cu13",
          "transformers", "tokenizers", "transferqueue", "ray"):
    print(f"  {n:26s} {install.get(n, '(the node has it)')}")
print("sdists built on install:", ", ".join(sdists) or "none")
if kept:
    print("FAIL: would replace the node's", ", ".join(kept))
if bad:
    print("FAIL: off their pins:", "; ".join(bad))
sys.exit(1 if bad or kept else 0)
PY
# the Transformer Engine torch extension: an sdist (pip builds it on the node, against the node's torch)
if "$W/stubs/bin/python" -m pip index versions transformer-engine-torch 2>/dev/null | grep -qE '[ ,]2\.12\.0(,|$)'; then
  echo "transformer_engine_torch 2.12.0: on the index (an sdist, built on the node with --no-build-isolation)"
else
  echo "FAIL: transformer_engine_torch==2.12.0 not on the index"; exit 1
fi
echo "OK: the GPU install resolves ($W/report.json)"
