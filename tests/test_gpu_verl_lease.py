"""The GPU lease's tools that run on the CPU too: the import-time summary (benchmarks/gpu_verl/importtime.py) and the
leases' timed imports (trial_cost.import_probes), the campaign plans' trial counts (plans/campaign.sh), the payload's
parts (build_payload.sh) and a lease's bundle laid out as its committed trials (import_bundle.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import trial_cost
from benchmarks.gpu_verl import importtime

DATA = Path(__file__).resolve().parent / "data" / "real_verl_gpu"

RAW = """import time: self [us] | cumulative | imported package
import time:       100 |        100 |   _io
import time:      2000 |       2000 |     vllm.config
import time:      1000 |       3000 |   vllm
import time:      7000 |       7000 | torch
not a line of importtime
"""


def test_parse_and_summary_rank_packages_by_their_own_time() -> None:
    rows = importtime.parse(RAW)
    assert [r[0] for r in rows] == ["_io", "vllm.config", "vllm", "torch"]
    assert rows[1] == ("vllm.config", 2000, 2000, 2)
    text = importtime.summary(rows)
    assert text.startswith("imports: 0.0 s in 4 modules")
    pkgs = text.split("by top-level package")[1].split("slowest")[0]
    assert pkgs.index("torch") < pkgs.index("vllm") < pkgs.index("_io") and "29.7%  vllm" in pkgs


def test_a_real_python_importtime_is_read_and_a_wrong_file_refused(tmp_path: Path) -> None:
    raw = tmp_path / "it.raw"
    raw.write_text(subprocess.run([sys.executable, "-X", "importtime", "-c", "import json"],
                                  capture_output=True, text=True).stderr)
    assert "json" in {r[0] for r in importtime.parse(raw.read_text())}
    assert importtime.main([str(raw)]) == 0
    bad = tmp_path / "bad.txt"
    bad.write_text("nothing here\n")
    assert importtime.main([str(bad)]) == 1 and importtime.main([]) == 2


PLANS = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_verl" / "plans"
L7 = Path(__file__).resolve().parent / "data" / "real_verl_gpu" / "h100_2026-11-25_l7" / "c-3b.db"


def _campaign(tmp_path: Path, call: str) -> str:
    env = {**os.environ, "SMOKE": str(tmp_path), "PYTHONPATH": str(PLANS.parents[2]),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    out = subprocess.run(["bash", "-c", f". {PLANS / 'campaign.sh'} 2>/dev/null; {call}"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_plus_n_counts_from_what_a_resumed_study_launched(tmp_path: Path) -> None:
    """--n-trials counts a study's launched trials: the 3B study of lease 7 holds 3, so one more is 4."""
    shutil.copy(L7, tmp_path / "c-3b.db")
    assert _campaign(tmp_path, "launched c-3b; target c-3b +1; target c-3b 2; target c-new +2").split() == \
        ["3", "4", "2", "2"]


def test_every_plan_that_resumes_a_study_asks_for_more_trials_than_it_holds() -> None:
    """A plan started with AT_RESUME=.../STUDY.db runs STUDY with `+N` (an absolute count at or under what the study
    held launched nothing: leases 9 and 10 as first written)."""
    resumed = 0
    for plan in PLANS.glob("lease*.sh"):
        text = plan.read_text()
        header = "".join(line for line in text.splitlines() if line.startswith("#"))
        for db in re.findall(r"AT_RESUME=\S*?([\w.-]+)\.db", header):
            calls = re.findall(rf"^(?:lane \d+ )?at \S+ {re.escape(db)} (\S+)", text, re.M)
            resumed += 1
            assert calls and all(c.startswith("+") for c in calls), (plan.name, db, calls)
    assert resumed >= 2


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_lane_runs_its_command_on_its_gpu_only_in_the_background(tmp_path: Path) -> None:
    """A plan's lanes (one study per GPU of a node of several) see one GPU each: CUDA_VISIBLE_DEVICES and LANE (its
    work dir) are set for the command, which runs in the background with its log in lane<GPU>.out."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"  # a node of four GPUs
    smi.write_text("#!/bin/sh\nfor i in 0 1 2 3; do echo \"GPU $i: NVIDIA H200 (UUID: GPU-$i)\"; done\n")
    smi.chmod(0o755)
    out = _campaign(tmp_path, f"PATH={bin_dir}:$PATH; lane 2 bash -c "
                              "'sleep 0.3; echo gpu=$CUDA_VISIBLE_DEVICES lane=$LANE host=$LANE_HOST_GIB'; "
                              "lane 3 bash -c 'echo gpu=$CUDA_VISIBLE_DEVICES'; echo started; wait; echo done")
    assert out.splitlines() == ["started", "done"]  # the lanes ran beside the plan, which waited for them
    lane2 = (tmp_path / "lane2.out").read_text()
    assert "gpu=2 lane=2 host=" in lane2
    assert "gpu=3" in (tmp_path / "lane3.out").read_text() and not (tmp_path / "lane0.out").exists()
    # each lane's share of the host's memory (`at` passes it as --host-memory): Ray's memory monitor kills for the
    # whole node, and lease 42's two lanes, each counting all of it, lost a 7B and a 3B trial at once
    mem_gib = next(int(ln.split()[1]) for ln in open("/proc/meminfo") if ln.startswith("MemTotal:")) / 1048576
    assert float(lane2.rsplit("host=", 1)[1].split()[0]) == pytest.approx(mem_gib / 4, abs=0.06)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("gpus", "name", "ran"), [
    (1, "NVIDIA H200", "one-gpu c-7b"), (2, "NVIDIA H200", "14b qwen2.5-14b c-14b-x2 2 800 --extra-steps 1"),
    (4, "NVIDIA H100 80GB HBM3", "h100 c-1.5b-h47 c-3b-h48")])
def test_a_plan_runs_its_branch_for_the_machine_lent(tmp_path: Path, gpus: int, name: str, ran: str) -> None:
    """`by_node COMMAND`: the plan's own command on one H200, the 14B over a node of two H200s, the H100 spreads on an
    H100 node, as the machine's nvidia-smi says (the studies replaced by echoes here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nfor i in $(seq 0 {gpus - 1}); do\n"
                   f"  if [ \"$1\" = -L ]; then echo \"GPU $i: {name} (UUID: GPU-$i)\"; else echo \"{name}\"; fi\n"
                   "done\n")
    smi.chmod(0o755)
    out = _campaign(tmp_path, f"PATH={bin_dir}:$PATH; . {PLANS / 'campaign.sh'}; "
                              "spread_h100() { echo h100 \"$@\"; }; two_gpu_study() { echo 14b \"$@\"; }; "
                              "by_node echo one-gpu c-7b")
    assert out == ran


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_fused_pairs_runs_each_configuration_with_and_without_fused_kernels_on_one_host(tmp_path: Path) -> None:
    """`fused_pairs` (leases 65-66): A with verl's fused kernels first (the cold trial), A and B without, B with, in one
    study; then AGAIN alone in a second: every pair on one host, the form unfused_logit_ps is fitted on."""
    out = _campaign(tmp_path, "at() { echo \"$*\"; }; fused_pairs m s sb 300 200 a=1 b=2 a=1,c=3")
    assert out.splitlines() == [
        "m s 4 300 --extra-steps 0 --enqueue a=1,use_fused_kernels=true --enqueue a=1 --enqueue b=2 "
        "--enqueue b=2,use_fused_kernels=true",
        "m sb 1 200 --extra-steps 0 --enqueue a=1,c=3"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_first_and_best_probes_the_host_only_where_no_plan_did(tmp_path: Path) -> None:
    """`first_and_best_05b` (leases 74 on): the H100 0.5B table's first launch and best in one study, the host probed
    before them where the lease's probe has not run (lease 74 ran it first, on a lease too short for the spread), and
    not again where an earlier plan probed it (the studies and the probe replaced by echoes here)."""
    call = "at() { echo \"$*\"; }; host_probe() { echo probe \"$1\"; }; first_and_best_05b s"
    tokens = "ppo_max_token_len_per_gpu=32768,log_prob_max_token_len_per_gpu={},gpu_memory_utilization=0.4"
    first = _campaign(tmp_path, call).splitlines()
    assert first[0] == "probe before" and len(first) == 2
    assert first[1].startswith("qwen2.5-0.5b s 2 200 --extra-steps 0 --enqueue ")
    assert [e.split(",use_dynamic_bsz=true,")[1].strip() for e in first[1].split("--enqueue ")[1:]] == [
        tokens.format(98304), tokens.format(32768)]
    (tmp_path / "host_speed_before.json").write_text("{}")
    assert _campaign(tmp_path, call).splitlines() == first[1:]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("name", "ran"), [
    ("NVIDIA H200", "h200-05b c-0.5b-h9 c-0.5b-h9b"), ("NVIDIA H100 80GB HBM3", "own fused_pairs x")])
def test_a_one_gpu_plan_runs_its_branch_for_the_card_lent(tmp_path: Path, name: str, ran: str) -> None:
    """`by_card TAG COMMAND` (leases 66 on): the H200 0.5B pair on an H200 without the 7B workload, the plan's own
    COMMAND on an H100, as the card's nvidia-smi says (the studies replaced by echoes here; the 7B pair, where the 7B
    workload is set up under /root, is left to the lease)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho \"{name}\"\n")
    smi.chmod(0o755)
    if Path("/root/work-qwen2.5-7b").exists():
        pytest.skip("this machine has the 7B workload set up")
    out = _campaign(tmp_path, f"PATH={bin_dir}:$PATH; . {PLANS / 'campaign.sh'}; "
                              "pair_7b() { echo 7b \"$@\"; }; pair_h200_05b() { echo h200-05b \"$@\"; }; "
                              "by_card h9 echo own fused_pairs x")
    assert out == ran


LATE = "reached --deadline: a trial here took up to 497 s and 366 s were left"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(("held", "said", "stopped", "before"), [
    (1, LATE, True, ""), (3, LATE, False, ""), (1, "reached --n-trials", False, ""),
    (1, "the space is exhausted", False, f"1 trials launched ({LATE})\n")])
def test_a_study_its_deadline_stopped_short_says_so_in_the_plans_log(tmp_path: Path, held: int, said: str,
                                                                      stopped: bool, before: str) -> None:
    """`at` stamps how many of its trials the study launched, and where its --deadline (the lease's end) stopped it
    short, with why: lease 52's and 53's 7B studies stopped at two of three, lease 52's log saying only "exit 0"
    (autotune replaced by a stand-in that prints how its run stopped and its arguments; the count read from the
    study's database). A resumed study's log holds its earlier runs: only this run's lines say how it stopped."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(f"#!/bin/sh\nif [ \"$1\" = -c ]; then echo {held}; "
                    f"else echo '{held} trials launched ({said})'; echo \"$@\" > {tmp_path}/argv; fi\n")
    fake.chmod(0o755)
    (tmp_path / "s.db").touch()
    (tmp_path / "s.out").write_text(before)
    out = _campaign(tmp_path, f"workload() {{ echo {tmp_path}; }}; DEADLINE=$(( $(date +%s) + 1000 )); "
                              f"PATH={bin_dir}:$PATH; at m s 3 450")
    last = out.splitlines()[-1]
    assert last.endswith(f"s: exit 0, {held} of 3 launched" + (f": {LATE}" if stopped else ""))
    argv = (tmp_path / "argv").read_text().split()
    assert "--timeout" not in argv and 990 <= int(argv[argv.index("--deadline") + 1]) <= 1000
    assert (tmp_path / "s.out").read_text() == f"{before}{held} trials launched ({said})\n"  # the run's log: SMOKE's


BUILD = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_verl" / "build_payload.sh"


def _parts(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path, bytes]:
    payload, stages = tmp_path / "payload", tmp_path / "stages"
    (payload / "wheels").mkdir(parents=True)
    stages.mkdir()
    data = os.urandom(2 * 1048576 + 512 * 1024)
    (payload / "payload.tar.xz").write_bytes(data)
    (payload / "payload.sha256").write_text("0" * 64 + "  payload.tar.xz\n")
    (payload / "wheels" / "a-1-py3-none-any.whl").write_bytes(os.urandom(700 * 1024))
    (stages / ".stage9").mkdir()  # a stale part of an earlier split
    run = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True, timeout=120, env={
        **os.environ, "STEPS": "parts", "PAYLOAD_DIR": str(payload), "STAGES_DIR": str(stages), "PY312": "", **env})
    return run, stages, data


def test_parts_hold_the_payload_in_order_each_within_the_part_size(tmp_path: Path) -> None:
    """A call carries 64 MiB with the working tree: 50 MiB parts stopped fitting when the tree passed 14 MiB. The
    parts come from payload.tar.xz without recompressing it and without a Python 3.12 (only the build needs one)."""
    run, stages, data = _parts(tmp_path, PART_MB="1")
    assert run.returncode == 0, run.stderr
    dirs = sorted(stages.glob(".stage*"), key=lambda d: int(d.name[6:]))
    assert [d.name for d in dirs] == [".stage1", ".stage2", ".stage3", ".stage4"]  # the stale .stage9 is gone
    chunks = sorted(stages.glob(".stage*/payload.tar.xz.part*"), key=lambda f: f.name)
    assert b"".join(f.read_bytes() for f in chunks) == data
    assert (dirs[2] / "payload.sha256").exists()
    assert [f.name for f in dirs[3].iterdir()] == ["a-1-py3-none-any.whl"]  # 0.5 + 0.7 MiB: a part of its own
    assert all(sum(f.stat().st_size for f in d.iterdir()) <= 1048576 for d in dirs)


def test_the_default_part_leaves_room_for_the_working_tree(tmp_path: Path) -> None:
    """The default part is what a call's 64 MiB leaves beside the working tree. The committed trials alone passed 60
    MiB with lease 41: with them in, the build says no part fits and how to make room (lease_tree.sh out); without
    them, the tree leaves parts of 40 MiB at least (6 calls for the ~310 MiB payload)."""
    run, _, _ = _parts(tmp_path)
    repo = BUILD.parents[2]
    files = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout.split(b"\0")
    sizes = {f.decode(): (repo / f.decode()).stat().st_size for f in files if f and (repo / f.decode()).is_file()}
    tree = sum(sizes.values())
    trials = sum(n for f, n in sizes.items() if f.startswith("tests/data/real_verl_gpu/"))
    if run.returncode == 0:
        part = int(re.search(r"parts of at most (\d+) MiB", run.stdout).group(1))
        assert part * 1048576 + tree <= 60 * 1048576
    else:
        assert tree > 59 * 1048576 and "lease_tree.sh out" in run.stdout, run.stdout
    assert (64 - 4 - 1) * 1048576 - (tree - trials) >= 40 * 1048576


def test_the_import_probes_of_leases_22_and_23_are_read_into_the_trial_cost_report() -> None:
    """The bytecode cache's measured effect (trial_cost.md) comes from the committed probes, not from numbers typed
    into the report: the same import as the image has it, with the cache cold, and warm."""
    probes = trial_cost.import_probes(DATA)
    l23 = probes["h200_2026-11-26_l23/import_probe23.txt"]
    assert l23 == {"as the image has it": 20.455, "bytecode cache, cold": 35.419, "bytecode cache, warm": 13.958}
    assert probes["h200_2026-11-26_l22/import_probe.txt"]["import verl.trainer.main_ppo"] == 13.895
    text = "\n".join(trial_cost.probe_report(probes))
    assert "6.5 s less in each process" in text and "15.0 s more once" in text
    assert trial_cost.probe_report({}) == []


def test_the_committed_trials_leave_the_tree_for_a_lease_and_come_back(tmp_path: Path) -> None:
    """lease_tree.sh: `out` moves tests/data/real_verl_gpu/ beside the repository (the device needs none of it and a
    call carries the tree with its part), `in` puts it back; neither overwrites what is already there."""
    repo = tmp_path / "repo"
    (repo / "benchmarks" / "gpu_verl").mkdir(parents=True)
    shutil.copy(BUILD.parent / "lease_tree.sh", repo / "benchmarks" / "gpu_verl" / "lease_tree.sh")
    trial = repo / "tests" / "data" / "real_verl_gpu" / "h200_l40" / "c.db"
    trial.parent.mkdir(parents=True)
    trial.write_bytes(b"study")
    stash = tmp_path / "stash"

    def lease_tree(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(repo / "benchmarks" / "gpu_verl" / "lease_tree.sh"), *args],
                              capture_output=True, text=True, env={**os.environ, "LEASE_STASH": str(stash)})

    assert lease_tree("status").stdout.startswith("in:")
    assert lease_tree("out").returncode == 0
    assert not trial.exists() and (stash / "real_verl_gpu" / "h200_l40" / "c.db").read_bytes() == b"study"
    assert lease_tree("status").stdout.startswith("out:")
    assert lease_tree("out").returncode == 1  # out twice: nothing moves
    trial.parent.mkdir(parents=True)  # a lease's trials copied in before `in`: refused, not overwritten
    assert lease_tree("in").returncode == 1 and (stash / "real_verl_gpu").is_dir()
    shutil.rmtree(repo / "tests" / "data" / "real_verl_gpu")
    assert lease_tree("in").returncode == 0 and trial.read_bytes() == b"study" and not stash.exists()
    assert lease_tree("in").returncode == 1


def test_the_default_part_counts_only_the_files_in_the_tree(tmp_path: Path) -> None:
    """With the committed trials moved out (lease_tree.sh out), their index entries name files that are not there:
    the tree's size is what a call carries, and the default part grows by what left (it failed before: xargs du)."""
    repo = tmp_path / "repo"
    (repo / "benchmarks" / "gpu_verl").mkdir(parents=True)
    shutil.copy(BUILD, repo / "benchmarks" / "gpu_verl" / "build_payload.sh")
    (repo / "trials.bin").write_bytes(os.urandom(6 * 1048576))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "t"], check=True)
    payload, stages = tmp_path / "payload", tmp_path / "stages"
    (payload / "wheels").mkdir(parents=True)
    stages.mkdir()
    (payload / "payload.tar.xz").write_bytes(os.urandom(1048576))
    (payload / "payload.sha256").write_text("0" * 64 + "  payload.tar.xz\n")

    def part_mib() -> int:
        run = subprocess.run(["bash", str(repo / "benchmarks" / "gpu_verl" / "build_payload.sh")], capture_output=True,
                             text=True, timeout=120, env={**os.environ, "STEPS": "parts", "PAYLOAD_DIR": str(payload),
                                                          "STAGES_DIR": str(stages), "PY312": ""})
        assert run.returncode == 0, run.stderr
        return int(re.search(r"parts of at most (\d+) MiB", run.stdout).group(1))

    with_trials = part_mib()
    (repo / "trials.bin").unlink()
    assert part_mib() == with_trials + 6


def _bundle_of(lease: Path, root: Path, lanes: dict[str, str] | None = None) -> Path:
    """A committed lease folder packed back as device.sh's bundle: trials under trials/[g<lane>/]<study>/."""
    bundle = root / "bundle"
    for p in sorted(lease.iterdir()):
        m = re.match(r"^(?P<study>.+)_(?P<dir>trial_\d{4}|ray_head)$", p.name)
        if m:
            lane = f"g{lanes[m['study']]}/" if lanes else ""
            shutil.copytree(p, bundle / "trials" / f"{lane}{m['study']}" / m["dir"])
        else:
            (bundle / p.name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, bundle / p.name)
    (bundle / "importtime.txt").write_text("not a record the project keeps\n")
    archive = root / "smoke_bundle.tar.xz"
    subprocess.run(["tar", "cJf", str(archive), "-C", str(root), "bundle"], check=True)
    return archive


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in d.rglob("*") if p.is_file()}


@pytest.mark.parametrize("lease, lanes", [("h200_2026-11-29_l51", None),
                                          ("h200_2026-11-28_l47", {"c-0.5b-h40": "1", "c-7b-h39": "0"})])
def test_a_bundle_is_laid_out_as_its_committed_lease(tmp_path: Path, lease: str, lanes: dict | None) -> None:
    """import_bundle turns a lease's bundle (one GPU, or lanes of a node under trials/g<lane>/) into the folder the
    tests read: the committed lease folder, byte for byte, without the bundle's other files."""
    from benchmarks.gpu_verl import import_bundle

    archive = _bundle_of(DATA / lease, tmp_path / "packed", lanes)
    dest = tmp_path / "data" / lease
    assert import_bundle.main([str(archive), str(dest)]) == 0
    assert _tree(dest) == _tree(DATA / lease)
    assert import_bundle.main([str(archive), str(dest)]) == 2  # never over committed files


def test_a_bundle_file_over_2_mb_is_named_and_a_bundle_without_trials_refused(tmp_path: Path, capsys) -> None:
    from benchmarks.gpu_verl import import_bundle

    trial = tmp_path / "bundle" / "trials" / "s" / "trial_0000"
    trial.mkdir(parents=True)
    (trial / "verl.log").write_bytes(b"x" * (import_bundle.MAX_FILE_BYTES + 1))
    (tmp_path / "bundle" / "s.db").write_bytes(b"db")
    assert import_bundle.main([str(tmp_path / "bundle"), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "over 2 MB, trim before committing: s_trial_0000/verl.log" in err
    empty = tmp_path / "empty" / "bundle"
    empty.mkdir(parents=True)
    assert import_bundle.main([str(empty), str(tmp_path / "out2")]) == 2
    assert "holds no study, trial or lease record" in capsys.readouterr().err
