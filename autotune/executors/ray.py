"""The Ray executor: up to K trials at once on a Ray cluster, each holding exactly its own GPUs for its whole life.

Resources through Ray's own model: per trial, one placement group per node of the job, in verl's own shape
(`n_gpus_per_node` bundles of {"CPU": 3, "GPU": 1}, STRICT_PACK; autotune/verl.py). The groups are a gang
reservation: a trial starts once all of them are ready and holds them until it ends; removing them frees its GPUs
on every node and makes Ray kill whatever still runs in them. verl's driver adopts the groups
(executors/verl_hook.py) instead of creating its own. The groups belong to this tuner's Ray job: if the tuner dies,
Ray removes them, which stops the trials on the cluster (the next run re-queues them).

The runner of a trial runs in a thread of this process (the verl runner's driver is a subprocess connected to the
cluster): logs, live parsing, watchdogs and failure classes are the runner's own, unchanged.
"""

from __future__ import annotations

import dataclasses
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from autotune import verl
from autotune.executors.base import Executor, Finished, Placement, interrupted, run_trial
from autotune.executors.verl_hook import NAMESPACE
from autotune.runners.base import Runner, RunnerUnavailable, StopSignal, TrialResult, TrialSpec, TrialStatus


class ExecutorError(RunnerUnavailable):
    """The Ray cluster cannot be reached, or cannot ever hold one trial; the message says what to do."""


def _unreachable(address: str, timeout_s: float = 5.0) -> str:
    """Why HOST:PORT takes no TCP connection ("" when it does, or for "auto"): Ray itself retries for minutes."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return ""
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return ""
    except OSError as e:
        return f"nothing answers at {host}:{port} ({e.strerror or type(e).__name__})"


def group_name(study: str, number: int, node: int) -> str:
    """A trial's placement group on its node-th node; recover() finds a dead tuner's groups by this name."""
    return f"autotune:{re.sub(r'[^A-Za-z0-9_.-]+', '-', study)[:150]}:t{number:05d}:n{node}"


@dataclass
class _Trial:
    spec: TrialSpec
    runner: Runner
    groups: list[Any]
    names: list[str]
    stop: StopSignal = field(default_factory=StopSignal)
    submitted: float = field(default_factory=time.monotonic)
    placement: Placement | None = None
    thread: threading.Thread | None = None
    finished: bool = False


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, parallel: int = 1, address: str | None = None, placement_timeout_s: float = 1800.0,
                 release_timeout_s: float = 60.0, watch_s: float = 1.0):
        super().__init__(parallel)
        try:
            import ray
        except ImportError:
            raise ExecutorError("--executor ray needs Ray: pip install 'autotune[ray]'") from None
        self._ray = ray
        self.address = address or "auto"
        self.placement_timeout_s = placement_timeout_s
        self.release_timeout_s = release_timeout_s
        self.watch_s = watch_s
        if not ray.is_initialized():
            unreachable = _unreachable(self.address)
            if unreachable:
                raise ExecutorError(
                    f"cannot connect to the Ray cluster at {self.address!r}: {unreachable}. Start one with `ray start "
                    "--head`, then pass --ray-address HEAD:6379") from None
            try:
                ray.init(address=self.address, namespace=NAMESPACE, log_to_driver=False, logging_level="ERROR")
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise ExecutorError(
                    f"cannot connect to the Ray cluster at {self.address!r}: {str(e).splitlines()[0]}. Start one "
                    "with `ray start --head` (or join this host to yours with `ray start --address HEAD:6379`), "
                    "then pass --ray-address HEAD:6379") from None
        self.gcs_address = ray.get_runtime_context().gcs_address
        self._trials: dict[int, _Trial] = {}
        self._done: queue.Queue[Finished] = queue.Queue()
        self._lock = threading.Lock()
        self._last_watch = 0.0

    def describe(self) -> str:
        return f"ray at {self.gcs_address} (up to {self.parallel} trials at once)"

    # Capacity -------------------------------------------------------------------------------------------------
    def node_gpus(self) -> dict[str, float]:
        """Total GPUs of each alive node, by node id."""
        return {n["NodeID"]: n["Resources"].get("GPU", 0.0) for n in self._ray.nodes() if n["Alive"]}

    def check(self, nodes: int, gpus_per_node: int) -> None:
        """Refuse a job the cluster can never hold (instead of waiting forever for its placement groups)."""
        fits = sum(int(g // gpus_per_node) for g in self.node_gpus().values())
        if fits < nodes:
            have = ", ".join(f"{g:g}" for g in self.node_gpus().values()) or "none"
            raise ExecutorError(
                f"the Ray cluster at {self.gcs_address} cannot hold one trial of {nodes} node(s) x {gpus_per_node} "
                f"GPUs (GPUs per alive node: {have}); add nodes, or tune for a smaller --nodes/--gpus")

    # Trials -------------------------------------------------------------------------------------------------
    def submit(self, spec: TrialSpec, runner: Runner) -> None:
        from ray.util.placement_group import placement_group

        gpn, nodes = spec.cluster.gpus_per_node, spec.cluster.nodes
        self.check(nodes, gpn)
        names = [group_name(spec.study, spec.number, i) for i in range(nodes)]
        bundle = {"CPU": verl.RAY_POOL_BUNDLE_CPU, "GPU": 1}
        groups = [placement_group([dict(bundle) for _ in range(gpn)], strategy=verl.RAY_POOL_STRATEGY, name=n)
                  for n in names]
        trial = _Trial(spec, runner, groups, names)
        trial.thread = threading.Thread(target=self._run, args=(trial,), name=f"trial-{spec.number}", daemon=True)
        with self._lock:
            self._trials[spec.number] = trial
        trial.thread.start()

    def _run(self, trial: _Trial) -> None:
        spec, runner = trial.spec, trial.runner
        fatal = None
        result: TrialResult | None = None
        if not self._wait_ready(trial):
            result = interrupted(runner, trial.stop.reason if trial.stop.is_set() else (
                f"not placed: the Ray cluster did not free {spec.cluster.nodes} x {spec.cluster.gpus_per_node} GPUs "
                f"within {self.placement_timeout_s:g} s; re-queued on resume"))
        else:
            trial.placement = self._placement(trial)
            placed = dataclasses.replace(spec, placement=trial.placement.as_dict(), stop=trial.stop)
            try:
                result, fatal = run_trial(runner, placed)
            except BaseException as e:  # noqa: BLE001 - nothing may escape a trial thread unrecorded
                result = TrialResult(TrialStatus.FAILED, f"runner error: {type(e).__name__}: {e}",
                                     simulated=runner.simulated)
            if trial.stop.is_set() and result.status in (TrialStatus.OK, TrialStatus.FAILED) \
                    and trial.stop.reason not in result.reason:
                result = dataclasses.replace(result, status=TrialStatus(trial.stop.status), reason=trial.stop.reason,
                                             throughput=None)
        release = self._release(trial)
        extra = {**result.extra, "placement_release": release}
        result = dataclasses.replace(result, extra=extra)
        trial.finished = True
        self._done.put(Finished(spec.number, result, time.monotonic() - trial.submitted, trial.placement, fatal))

    def _wait_ready(self, trial: _Trial) -> bool:
        deadline = time.monotonic() + self.placement_timeout_s
        refs = [g.ready() for g in trial.groups]
        while time.monotonic() < deadline and not trial.stop.is_set():
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0.2)
            if len(ready) == len(refs):
                return True
        return False

    def _placement(self, trial: _Trial) -> Placement:
        from ray.util.placement_group import placement_group_table

        ips = {n["NodeID"]: n["NodeManagerAddress"] for n in self._ray.nodes()}
        nodes = []
        for g in trial.groups:
            node_ids = set(placement_group_table(g)["bundles_to_node_id"].values())
            nodes.append(",".join(f"{ips.get(i, '?')}/{i[:8]}" for i in sorted(node_ids)))
        return Placement(self.name, tuple(nodes), trial.spec.cluster.gpus_per_node, tuple(trial.names))

    def _release(self, trial: _Trial) -> dict[str, Any]:
        """Remove the trial's groups (Ray kills what still runs in them) and wait until their GPUs are free."""
        from ray.util.placement_group import placement_group_table, remove_placement_group

        t0 = time.monotonic()
        for g in trial.groups:
            try:
                remove_placement_group(g)
            except Exception:  # noqa: BLE001 - already removed (its owner or a node went away)
                pass
        while time.monotonic() - t0 < self.release_timeout_s:
            if all(placement_group_table(g).get("state") in ("REMOVED", None) for g in trial.groups):
                return {"released": True, "seconds": round(time.monotonic() - t0, 3)}
            time.sleep(0.05)
        return {"released": False, "seconds": round(time.monotonic() - t0, 3)}

    def wait(self, timeout: float | None = None) -> list[Finished]:
        deadline = None if timeout is None else time.monotonic() + timeout
        done: list[Finished] = []
        while True:
            self._watch()
            try:
                done.append(self._done.get(timeout=0.2))
                while True:
                    done.append(self._done.get_nowait())
            except queue.Empty:
                pass
            if done or not self._trials or (deadline is not None and time.monotonic() > deadline):
                with self._lock:
                    for f in done:
                        self._trials.pop(f.number, None)
                return done

    def _watch(self) -> None:
        """Stop a trial whose node left the cluster: its groups are rescheduling, its processes there are gone."""
        now = time.monotonic()
        if now - self._last_watch < self.watch_s:
            return
        self._last_watch = now
        from ray.util.placement_group import placement_group_table

        with self._lock:
            trials = [t for t in self._trials.values() if t.placement is not None and not t.finished]
        for t in trials:
            states = {placement_group_table(g).get("state") for g in t.groups}
            if "RESCHEDULING" in states:
                t.stop.set(f"a Ray node of the trial left the cluster while it ran (placement {t.placement.describe()}"
                           "); its GPUs were released", "failed")

    def stop_all(self, reason: str) -> list[Finished]:
        with self._lock:
            trials = list(self._trials.values())
        for t in trials:
            t.stop.set(reason, "interrupted")
        done = []
        for t in trials:
            if t.thread is not None:
                t.thread.join(timeout=120)
        while True:
            try:
                f = self._done.get_nowait()
            except queue.Empty:
                break
            res = f.result
            if res.status != TrialStatus.INTERRUPTED:
                res = dataclasses.replace(res, status=TrialStatus.INTERRUPTED, reason=reason, throughput=None)
            done.append(dataclasses.replace(f, result=res))
        with self._lock:
            self._trials.clear()
        return done

    @property
    def running(self) -> int:
        with self._lock:
            return len(self._trials)

    def placement_of(self, number: int) -> Placement | None:
        t = self._trials.get(number)
        return t.placement if t else None

    def reclaim(self, study: str, numbers: list[int]) -> list[str]:
        """Remove placement groups of these trials still on the cluster (a dead tuner's); returns their names."""
        from ray.util.placement_group import get_placement_group, remove_placement_group

        removed = []
        for n in numbers:
            for i in range(64):
                name = group_name(study, n, i)
                try:
                    g = get_placement_group(name)
                except ValueError:
                    break
                remove_placement_group(g)
                removed.append(name)
        return removed

    def close(self) -> None:
        if self._trials:
            self.stop_all("the tuner stopped while this trial ran; re-queued on resume")
        if self._ray.is_initialized():
            self._ray.shutdown()
