"""`autotune doctor` on fake GPU nodes (stub packages first on the child's PYTHONPATH, tests/stub_stack.py): every
check's failure path says what to fix, a good node passes with the job defaults it implies, and the verl runner
refuses a bad node before it launches anything."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from autotune import verl
from autotune.job import Job
from autotune.runners.base import RunnerFatal
from autotune.verl.doctor import bytecode_finding, diagnose, run_doctor
from tests.conftest import cli_run, make_setup
from tests.fake_verl import env_for, fake_runner, launches, leftovers, make_spec
from tests.stub_stack import stack_env, write_stack


def doctor(tmp_path: Path, head_dim: int = 128, timeout_s: float = 60.0, **stack):
    root = write_stack(tmp_path / "stack", **stack)
    return run_doctor(head_dim, env=stack_env(root), timeout_s=timeout_s)


def fixes(d) -> dict[str, str]:
    return {f.check: f.text for f in d.findings if f.level == "fix"}


def test_a_good_node_passes_and_picks_the_job_defaults(tmp_path: Path) -> None:
    d = doctor(tmp_path, head_dim=64)
    assert d.ok, d.lines()
    text = "\n".join(d.lines())
    assert "1 x NVIDIA H100 80GB HBM3 (NVIDIA driver 580.159.04)" in text
    assert "torch sees 1 GPU(s)" in text and "verl: imports" in text and "vllm: imports" in text
    # flash-attn missing, TE's fused attention serves head size 64; no Megatron-Bridge: mbridge
    assert d.job_defaults == {verl.ATTENTION_BACKEND: "fused", verl.VANILLA_MBRIDGE: True}
    # mbridge 0.15.1 against megatron-core 0.19 imports only thanks to the shim (the stub uses the removed name)
    assert "mbridge_shim" in text and "mbridge: imports" in text
    assert all(ln.split()[0] in ("ok", "warn") for ln in d.lines())


def test_flash_attn_present_needs_no_attention_default(tmp_path: Path) -> None:
    d = doctor(tmp_path, flash_attn=True)
    assert d.ok and verl.ATTENTION_BACKEND not in d.job_defaults
    assert "flash (flash-attn) serves head size 128" in "\n".join(d.lines())


@pytest.mark.parametrize("versions,check,words", [
    ({"verl": "0.9.0"}, "verl", "pip install verl==0.9.1"),
    ({"transformers": "5.12.0"}, "transformers", ">=5.5.3,<5.11"),
    ({"transformer-engine": "2.13.0"}, "transformer-engine", "does not load with torch 2.11's cuBLAS"),
    ({"vllm": None}, "vllm", "not installed (tested: 0.24.0): pip install -c constraints/gpu-node-torch2.11.txt"),
    ({"transformer-engine-torch": None}, "transformer-engine-torch", "--no-build-isolation"),
])
def test_versions_against_the_pins(tmp_path: Path, versions: dict, check: str, words: str) -> None:
    d = doctor(tmp_path, versions=versions)
    assert not d.ok and words in fixes(d)[check]


def test_a_different_tokenizers_is_a_warning_only(tmp_path: Path) -> None:
    d = doctor(tmp_path, versions={"tokenizers": "0.22.9"})
    assert d.ok and any(f.check == "tokenizers" and f.level == "warn" for f in d.findings)


def test_no_cuda_gpu(tmp_path: Path) -> None:
    d = doctor(tmp_path, cuda=False)
    assert "torch sees no CUDA GPU" in fixes(d)["cuda"]


def test_nvml_missing_is_a_warning_and_busy_gpus_are_named(tmp_path: Path) -> None:
    d = doctor(tmp_path, nvml_init="raise RuntimeError('NVML Shared Library Not Found')")
    assert d.ok and any(f.check == "nvml" and f.level == "warn" and "NVML Shared Library" in f.text
                        for f in d.findings)
    d = doctor(tmp_path / "b", gpu_used_gib=30.0)
    assert d.ok and any("GPU 0 holds 30.0 GiB already" in ln for ln in d.lines())


def test_transformer_engine_that_does_not_load(tmp_path: Path) -> None:
    d = doctor(tmp_path, modules={"transformer_engine.pytorch": "raise OSError('/x/libtransformer_engine.so: "
                                  "undefined symbol: cublasLtGroupedMatrixLayoutInit_internal')"})
    text = fixes(d)["transformer_engine"]
    assert "undefined symbol" in text and "transformer_engine_torch==2.12.0" in text


def test_a_head_size_no_fast_backend_serves_falls_back_to_unfused(tmp_path: Path) -> None:
    d = doctor(tmp_path, head_dim=576)
    assert d.ok and d.job_defaults[verl.ATTENTION_BACKEND] == "unfused"
    assert any(f.check == "attention" and f.level == "warn" for f in d.findings)


CUDNN_FAILURE = ("/TransformerEngine/transformer_engine/common/fused_attn/fused_attn_f16_arbitrary_seqlen.cu:414 in "
                 "function operator(): cuDNN Error: CUDNN_BACKEND_TENSOR_DESCRIPTOR cudnnFinalize failed")


def test_fused_attention_offered_but_failing_when_run_falls_back_to_unfused(tmp_path: Path) -> None:
    """TE's backend query said fused on the H100; cuDNN then failed at verl's step 1: the doctor runs it once."""
    te = ("class DotProductAttention:\n    def __init__(self, *a, **k):\n"
          f"        raise RuntimeError({CUDNN_FAILURE!r})\n")
    d = doctor(tmp_path, head_dim=64, modules={"transformer_engine.pytorch": te})
    assert d.ok and d.job_defaults[verl.ATTENTION_BACKEND] == "unfused"
    warn = next(f.text for f in d.findings if f.check == "attention")
    assert "failed when run" in warn and "cudnnFinalize failed" in warn


def test_fused_attention_that_cannot_be_called_is_not_a_verdict(tmp_path: Path) -> None:
    """Another TE API (the stub has no DotProductAttention): the backend query's answer stands."""
    d = doctor(tmp_path, head_dim=64)
    assert d.job_defaults[verl.ATTENTION_BACKEND] == "fused"


@pytest.mark.parametrize("module,check", [
    ("megatron.core", "megatron_core"), ("vllm", "vllm"), ("verl.trainer.main_ppo", "verl"),
    ("verl.workers.engine.megatron.transformer_impl", "verl_megatron"), ("mbridge.core.util", "mbridge"),
])
def test_an_import_that_fails(tmp_path: Path, module: str, check: str) -> None:
    d = doctor(tmp_path, modules={module: "raise ImportError('libcudart.so.12: cannot open shared object file')"})
    assert "libcudart.so.12" in fixes(d)[check]


def test_mbridge_fails_without_the_shim(tmp_path: Path) -> None:
    """The stub mbridge really needs the shim: imported without it, it fails as mbridge 0.15.1 does."""
    import subprocess
    import sys

    root = write_stack(tmp_path / "stack")
    proc = subprocess.run([sys.executable, "-c", "import mbridge.core.util"], env=stack_env(root),
                          capture_output=True, text=True)
    assert "AttributeError: encoder_and_decoder" in proc.stderr
    proc = subprocess.run([sys.executable, "-c", "from autotune.verl import shims as verl_shims; verl_shims.install(); "
                           "import mbridge.core.util as u; print(u.IS_ENC_DEC)"], env=stack_env(root),
                          capture_output=True, text=True)
    assert proc.stdout.strip() == "False", proc.stderr


def test_a_hanging_import_is_named(tmp_path: Path) -> None:
    # the probe reaches vLLM's import in well under a second (stub packages); the time limit waits out the hang
    d = doctor(tmp_path, timeout_s=4.0, modules={"vllm": "import time\ntime.sleep(600)"})
    assert "did not finish in 4 s while importing vLLM" in fixes(d)["probe"]


def test_a_crashing_import_is_named(tmp_path: Path) -> None:
    d = doctor(tmp_path, modules={"vllm": "import os, sys\nsys.stderr.write('Fatal Python error: Aborted\\n')\n"
                                          "os._exit(134)"})
    assert "died with exit code 134 (Fatal Python error: Aborted)" in fixes(d)["probe"]


def test_a_node_without_torch_or_nvml_says_no_gpu_here_first_and_torch_once() -> None:
    """Issue 25 item 22: on a CPU machine the first line says there is no GPU; torch missing is one fix, not two."""
    versions = {**verl.GPU_STACK, "torch": None, "vllm": None}
    d = diagnose([{"check": "python", "ok": True, "version": "3.12.3"},
                  {"check": "versions", "ok": True, "versions": versions},
                  {"check": "nvml", "ok": False, "error": "pynvml.NVMLError_LibraryNotFound: NVML Shared Library "
                                                          "Not Found"},
                  {"check": "torch", "ok": False, "error": "ModuleNotFoundError: No module named 'torch'"},
                  {"check": "transformer_engine", "ok": False, "error": "ModuleNotFoundError: No module named "
                                                                        "'torch'"},
                  {"check": "done", "ok": True}])
    problems = d.problems()
    assert problems[0].startswith("FIX   gpus: no GPU here (NVML: pynvml.NVMLError_LibraryNotFound") and \
        "torch does not import" in problems[0], problems
    assert d.lines()[0] == problems[0]
    torch_fixes = [p for p in problems if p.split()[1] == "torch:"]
    assert len(torch_fixes) == 1 and "not installed" in torch_fixes[0] and "CUDA torch 2.11.0" in torch_fixes[0]
    assert not any(p.split()[1] in ("nvml:", "cuda:") for p in problems)


def test_a_cpu_torch_without_nvml_is_no_gpu_here(tmp_path: Path) -> None:
    d = doctor(tmp_path, cuda=False, nvml_init="raise RuntimeError('NVML Shared Library Not Found')")
    assert d.problems()[0].startswith("FIX   gpus: no GPU here (NVML: RuntimeError: NVML Shared Library Not Found; "
                                      "torch 2.11.0+cu130 sees no CUDA GPU)"), d.problems()
    assert "cuda" not in fixes(d)


def test_the_fixes_name_the_constraints_file_this_install_has(tmp_path: Path, monkeypatch) -> None:
    """A checkout names its own constraints/ (relative from its top, absolute elsewhere); the file exists."""
    from autotune.verl import doctor as doc

    monkeypatch.chdir(tmp_path)
    path = doc.constraints_path()
    assert path.is_file() and str(path) in doc.install() and str(path) in doc.install_te_torch()


def test_old_python_is_refused() -> None:
    d = diagnose([{"check": "python", "ok": True, "version": "3.9.18"}, {"check": "done", "ok": True}])
    assert not d.ok and "needs Python 3.10+" in fixes(d)["python"]


def test_the_command_prints_one_line_per_check_and_exits_1(tmp_path: Path, capsys, monkeypatch) -> None:
    root = write_stack(tmp_path / "stack", cuda=False)
    for k, v in stack_env(root).items():
        monkeypatch.setenv(k, v)
    code, out, _ = cli_run(capsys, "doctor", "--model", "qwen2.5-0.5b", "--timeout", "60")
    assert code == 1
    assert "qwen2.5-0.5b's head size 64" in out and "FIX   cuda: torch sees no CUDA GPU" in out
    assert "NOT READY: 1 problem(s)" in out
    code, out, _ = cli_run(capsys, "doctor", "--json", "--timeout", "60")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and any(f["check"] == "cuda" for f in doc["findings"])


def test_a_ready_nodes_last_line_gives_the_time_the_lease_reports_read(tmp_path: Path, capsys, monkeypatch) -> None:
    """The ready line ends with the doctor's seconds: benchmarks/host_levels.py reads each lease's doctor.txt by it (the
    lease's doctor time follows its host's speed)."""
    from benchmarks import host_levels

    root = write_stack(tmp_path / "stack")
    for k, v in stack_env(root).items():
        monkeypatch.setenv(k, v)
    code, out, _ = cli_run(capsys, "doctor", "--model", "qwen2.5-0.5b", "--timeout", "60")
    assert code == 0, out
    (tmp_path / "lease").mkdir()
    (tmp_path / "lease" / "doctor.txt").write_text(out)
    seconds = host_levels.doctor_seconds("lease", tmp_path)
    assert seconds is not None and 0 <= seconds < 60


# the verl runner runs the same checks before its first trial ----------------------------------------------------
def test_the_runner_refuses_a_bad_node_before_launching(tmp_path: Path) -> None:
    root = write_stack(tmp_path / "stack", versions={"vllm": None})
    rec = tmp_path / "rec.jsonl"
    runner = fake_runner({**env_for(rec, FAKE_VERL_MODE="ok"), "PYTHONPATH": stack_env(root)["PYTHONPATH"]},
                         doctor=True)
    setup = make_setup()
    with pytest.raises(RunnerFatal, match=r"(?s)cannot run a verl trial.*\n  FIX   vllm: not installed"):
        runner.run(make_spec(setup, tmp_path, number=0))
    with pytest.raises(RunnerFatal):  # and keeps refusing, without checking again
        runner.run(make_spec(setup, tmp_path, number=1))
    assert launches(rec) == []


def test_run_refuses_a_bad_node_before_recording_anything_one_line_per_fix(tmp_path, capsys, monkeypatch) -> None:
    """Issue 25 item 6: `autotune run --backend verl` on a node the doctor refuses exits 2 with one line per fix,
    before any trial is recorded (no database is created)."""
    root = write_stack(tmp_path / "stack", versions={"vllm": None, "mbridge": None}, cuda=False)
    for k, v in stack_env(root).items():
        monkeypatch.setenv(k, v)
    db = tmp_path / "v.db"
    code, out, err = cli_run(capsys, "run", "--model", "qwen2.5-0.5b", "--backend", "verl", "--storage",
                             f"sqlite:///{db}", "--workdir", str(tmp_path / "w"), "--n-trials", "1")
    lines = err.strip().splitlines()
    assert code == 2, (out, err)
    assert lines[0] == "autotune: error: this node cannot run a verl trial; `autotune doctor` says what to fix:"
    fixes = lines[1:]
    assert any("vllm: not installed" in ln for ln in fixes) and any("mbridge: not installed" in ln for ln in fixes)
    assert all(ln.startswith("  FIX   ") and len(ln) < 300 for ln in fixes), fixes
    assert not db.exists() and "#0" not in out


def test_the_runner_adds_the_doctors_defaults_the_job_leaves_open(tmp_path: Path) -> None:
    root = write_stack(tmp_path / "stack")
    rec = tmp_path / "rec.jsonl"
    env = {**env_for(rec, FAKE_VERL_MODE="ok", FAKE_VERL_TEARDOWN_S="0.2"), "PYTHONPATH": stack_env(root)["PYTHONPATH"]}
    job = Job.from_mapping({verl.ATTENTION_BACKEND: "unfused"}, "job.yaml")  # the user's own choice stays
    runner = fake_runner(env, doctor=True)
    res = runner.run(make_spec(make_setup(job=job), tmp_path, number=0, measure_step=1))
    assert res.status.value == "ok", res.reason
    (argv,) = [r["argv"] for r in launches(rec)]
    assert f"{verl.VANILLA_MBRIDGE}=true" in argv
    assert f"{verl.ATTENTION_BACKEND}=unfused" in argv and f"{verl.ATTENTION_BACKEND}=fused" not in argv
    assert f"{verl.RAY_SETUP_HOOK_KEY}=autotune.verl.shims.install" in argv
    assert res.extra["job_defaults"] == {verl.VANILLA_MBRIDGE: True}
    assert leftovers(rec) == []


def test_the_job_defaults_pass_verls_own_config_checks(tmp_path: Path) -> None:
    from autotune.runners.verl import VerlRunner
    from autotune.verl.doctor import Diagnosis
    from autotune.verl.preflight import hydra_overrides, validate_overrides, verl_importable

    if not verl_importable():
        pytest.skip("verl is not installed here")
    runner = VerlRunner()
    runner.diagnosis = Diagnosis((), {verl.ATTENTION_BACKEND: "fused", verl.VANILLA_MBRIDGE: True})
    spec = make_spec(make_setup(), tmp_path)
    ov = hydra_overrides(runner.argv(spec, runner.short_run_overrides(spec, tmp_path / "m.jsonl", "/tmp/x", 1)))
    assert f"{verl.ATTENTION_BACKEND}=fused" in ov and f"{verl.VANILLA_MBRIDGE}=true" in ov
    res = validate_overrides(ov)
    assert res.ok, res.message


def test_trials_and_the_doctor_find_torchs_cudnn_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A system cuDNN of another release must not shadow the nvidia-cudnn wheel torch loads (an H100 node had
    9.14 in /usr/local/cuda and /lib beside torch's 9.19: Transformer Engine then failed to load)."""
    import importlib

    from autotune.verl import doctor as doc

    lib = tmp_path / "nvidia" / "cudnn" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudnn.so.9").write_bytes(b"")
    (tmp_path / "nvidia" / "cudnn" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("nvidia.cudnn", "nvidia"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.invalidate_caches()
    env = doc.stack_env({"LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "CUDNN_PATH": "/usr/local/cuda"})
    assert env["LD_LIBRARY_PATH"].split(":") == [str(lib), "/usr/local/cuda/lib64"]
    assert doc.stack_env(env)["LD_LIBRARY_PATH"] == env["LD_LIBRARY_PATH"]  # once
    # Transformer Engine finds cuDNN through CUDNN_PATH/CUDNN_HOME before the loader's path: with torch's there,
    # only one cuDNN is mapped (2026-11-25, H100: with LD_LIBRARY_PATH alone TE mapped the system's 9.14 beside
    # torch's 9.19, and every fused attention failed at cudnnFinalize)
    assert env["CUDNN_PATH"] == env["CUDNN_HOME"] == str(lib.parent)


def test_a_node_that_compiles_every_import_in_every_process_is_told_how_to_keep_the_bytecode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lent machines' image: PYTHONDONTWRITEBYTECODE=1 over a torch without .pyc files. The doctor warns (a
    user's own runs pay it in every process) and says what autotune's trials do instead; no warning where bytecode
    may be written, where the user chose a prefix, or where the packages carry their bytecode."""
    finding = bytecode_finding({verl.NO_BYTECODE_ENV: "1"}, False)
    assert finding is not None and finding.level == "warn"
    assert verl.BYTECODE_PREFIX_ENV in finding.text and "<workdir>/cache/pycache" in finding.text
    assert bytecode_finding({}, False) is None
    assert bytecode_finding({verl.NO_BYTECODE_ENV: "1", verl.BYTECODE_PREFIX_ENV: "/x"}, False) is None
    assert bytecode_finding({verl.NO_BYTECODE_ENV: "1"}, True) is None
    assert bytecode_finding({verl.NO_BYTECODE_ENV: "1"}, None) is None  # no torch here: nothing known
    # through `run_doctor`, with the fake node's stack
    monkeypatch.setattr("autotune.verl.doctor.has_bytecode", lambda: False)
    root = write_stack(tmp_path / "stack")
    d = run_doctor(128, env={**stack_env(root), verl.NO_BYTECODE_ENV: "1"}, timeout_s=60.0)
    assert d.ok and any(ln.startswith("warn  bytecode:") for ln in d.lines())
