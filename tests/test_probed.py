"""The probe stage: a probe OOM prunes the candidate before the full trial; probe numbers ride along."""

from autotune.runners.base import Runner, TrialResult, TrialSpec, TrialStatus
from autotune.runners.probed import ProbedRunner
from autotune.runners.simulate import SimulateRunner
from autotune.study.study import Tuner
from tests.conftest import make_setup


class ScriptedProber(Runner):
    """Stands in for the Megatron-core probe (GPU-only): OOM for TP=2 layouts, else a measured-looking result."""

    name = "probe"

    def __init__(self):
        self.seen: list[TrialSpec] = []

    def run(self, spec: TrialSpec) -> TrialResult:
        self.seen.append(spec)
        if spec.candidate.tp == 2:
            return TrialResult(TrialStatus.OOM, "probe oom: torch.OutOfMemoryError: CUDA out of memory.",
                               extra={"probe": {"status": "oom", "error": "CUDA out of memory"}})
        return TrialResult(TrialStatus.OK, "training step only", throughput=9000.0, peak_memory_gib=50.0,
                           extra={"probe": {"status": "ok", "throughput_train": 9000.0}})


class CountingSimulate(SimulateRunner):
    def __init__(self):
        self.calls = 0

    def run(self, spec):
        self.calls += 1
        return super().run(spec)


def test_probe_oom_prunes_before_the_full_trial(sqlite_url, tmp_path):
    prober, full = ScriptedProber(), CountingSimulate()
    tuner = Tuner(make_setup(), ProbedRunner(prober, full), sqlite_url, "probed", workdir=tmp_path)
    tuner.run(n_trials=6)
    rows = tuner.store.trials("probed")
    probed = [r for r in rows if r.extra and "probe" in r.extra]
    assert len(probed) == len(prober.seen) > 0
    pruned = [r for r in probed if r.status == "pruned"]
    ran = [r for r in probed if r.status == "ok"]
    assert pruned and ran
    assert all("probe OOM, full trial not launched" in r.reason and r.params["tp"] == 2 for r in pruned)
    assert all(r.params["tp"] != 2 and r.extra["probe"]["throughput_train"] == 9000.0 for r in ran)
    assert full.calls == len(ran)
    assert not any(r.launched for r in pruned)  # the full trial never started: it costs no launch
    assert tuner.launched_count() == 6 == len([r for r in rows if r.launched])
    assert all(str(s.workdir).endswith("probe") for s in prober.seen)
