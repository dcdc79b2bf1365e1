"""The Ray executor: up to K trials at once on a Ray cluster, each holding exactly its own GPUs for its whole life.

Resources through Ray's own model: per trial, one placement group per node of the job, in verl's own shape
(`n_gpus_per_node` bundles of {"CPU": 3, "GPU": 1}, STRICT_PACK; autotune/verl/keys.py). The groups are a gang
reservation: a trial starts once all of them are ready and holds them until it ends; removing them frees its GPUs
on every node and makes Ray kill whatever still runs in them. verl's driver adopts the groups
(verl/ray_hook.py) instead of creating its own. The groups belong to this tuner's Ray job: if the tuner dies,
Ray removes them, which stops the trials on the cluster (the next run re-queues them).

The runner of a trial runs in a thread of this process (the verl runner's driver is a subprocess connected to the
cluster): logs, live parsing, watchdogs and failure classes are the runner's own, unchanged.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune import verl
from autotune.executors.base import Executor, Finished, Placement, interrupted, run_trial
from autotune.runners.base import Runner, RunnerUnavailable, StopSignal, TrialResult, TrialSpec, TrialStatus
from autotune.verl.ray_hook import NAMESPACE


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


def cluster_record() -> Path:
    """Where `ray start` records the cluster this host belongs to (Ray's rule: RAY_TMPDIR, else TMPDIR, else /tmp)."""
    return Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp") / "ray" / "ray_current_cluster"


@dataclass(frozen=True)
class Found:
    """The cluster to join and, where the user named none, which one was found and where (said on the console)."""

    address: str  # HOST:PORT, or "local": start a private Ray for this run
    said: str = ""
    source: str = ""  # where the address came from: "--ray-address", "RAY_ADDRESS", the record's path, ""


def find_cluster(given: str | None) -> Found:
    """--ray-address, else RAY_ADDRESS, else the cluster `ray start` recorded on this host (joined: this host is
    part of it, and it is said, with its address), else a private local Ray. Never Ray's legacy "auto", which
    joins any Ray process it finds on the host (another user's, a test suite's)."""
    if given:
        return Found(given, source="--ray-address")
    head = "--executor ray without --ray-address"
    env = os.environ.get("RAY_ADDRESS", "").strip()
    if env:
        return Found(env, f"{head}: joining the Ray cluster at {env} (RAY_ADDRESS)", "RAY_ADDRESS")
    record = cluster_record()
    try:
        recorded = record.read_text().strip()
    except OSError:
        recorded = ""
    if recorded:
        return Found(recorded, f"{head}: found the Ray cluster at {recorded}, which this host joined with `ray "
                               f"start` (recorded in {record}); joining it. --ray-address HOST:PORT picks another, "
                               "--ray-address local starts a private one", str(record))
    return Found("local", f"{head}: no Ray cluster on this host (no RAY_ADDRESS, no {record}): starting a private "
                          "local one for this run, with this node's GPUs; it stops when the run ends")


def _auth_token() -> tuple[str, str]:
    """The token Ray would send in token mode, and where it comes from (Ray's own order); ("", where) if none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip(), "RAY_AUTH_TOKEN"
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token").expanduser()
    try:
        return path.read_text().strip(), str(path)
    except OSError:
        return "", str(path)


def _auth_refused(address: str, timeout_s: float = 5.0) -> str:
    """Why the cluster's GCS refuses this process (token authentication), in words; "" when it accepts it, when it
    cannot tell (no grpcio, which comes with ray[default]), or for "auto" and ray:// (Ray finds the token itself)."""
    if address in ("auto", "local") or "://" in address:
        return ""
    try:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:
        return ""
    token, where = _auth_token()
    token_mode = os.environ.get("RAY_AUTH_MODE", "").lower() == "token"
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)

        def refuses(metadata: list[tuple[str, str]] | None) -> bool:
            try:
                stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s, metadata=metadata)
            except grpc.RpcError as e:
                return e.code() == grpc.StatusCode.UNAUTHENTICATED
            return False

        if not refuses(None):
            return ""
        if not token_mode:
            have = f"a token is in {where}, but " if token else ""
            return ("authentication failed: the cluster requires Ray's token authentication (InvalidAuthToken) and "
                    f"{have}this process sends none (Ray sends a token to an explicit --ray-address only with "
                    "RAY_AUTH_MODE=token). Set RAY_AUTH_MODE=token, with the cluster's token in ~/.ray/auth_token "
                    "or RAY_AUTH_TOKEN (`ray get-auth-token` on the head node prints it)")
        if not token:
            return (f"authentication failed: RAY_AUTH_MODE=token but no token found ({where} is missing); put the "
                    "cluster's token there or in RAY_AUTH_TOKEN (`ray get-auth-token` on the head node prints it)")
        if refuses([("authorization", f"Bearer {token}")]):
            return (f"authentication failed: the cluster refused the token from {where} (InvalidAuthToken): it is "
                    "not this cluster's token; `ray get-auth-token` on the head node prints the right one")
    return ""


class _own_signal_handlers:
    """Keeps this process's SIGTERM/SIGINT handlers across ray.init: Ray's driver set-up replaces SIGTERM's with
    `sys.exit(15)` and its core worker adds a native stack dump, so a SIGTERM would skip the tuner's own ending
    (trials recorded interrupted, stopped on the cluster). Restoring the Python handler also removes the dump."""

    def __enter__(self) -> None:
        main = threading.current_thread() is threading.main_thread()
        self.saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def _bundle_text(bundle: dict[str, float]) -> str:
    return "{" + ", ".join(f'"{r}": {v:g}' for r, v in bundle.items()) + "}"


def _scheduling_state(group: Any) -> str:
    """Ray's scheduling state of a placement group (QUEUED, NO_RESOURCES, INFEASIBLE, ...; GCS table, no dashboard)."""
    from ray.util.placement_group import placement_group_table

    try:
        return placement_group_table(group).get("stats", {}).get("scheduling_state", "")
    except Exception:  # noqa: BLE001 - removed meanwhile
        return ""


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
        found = find_cluster(address)
        self.address, self.found = found.address, found.said
        stale = (f" (the address {found.source} records: a cluster that ended without `ray stop`, which clears the "
                 "record)") if found.source not in ("", "--ray-address", "RAY_ADDRESS") else ""
        self.placement_timeout_s = placement_timeout_s
        self.release_timeout_s = release_timeout_s
        self.watch_s = watch_s
        if not ray.is_initialized():
            unreachable = _unreachable(self.address)
            if unreachable:
                raise ExecutorError(
                    f"cannot connect to the Ray cluster at {self.address!r}{stale}: {unreachable}. Start one with "
                    "`ray start --head`, then pass --ray-address HEAD:6379 (or --ray-address local)") from None
            refused = _auth_refused(self.address)
            if refused:  # Ray itself would retry for ~20 s, a warning line a second, then say "cannot connect"
                raise ExecutorError(f"cannot connect to the Ray cluster at {self.address!r}: {refused}") from None
            try:
                with _own_signal_handlers():
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
    @staticmethod
    def bundle() -> dict[str, float]:
        """What each GPU of a trial asks of its node: verl's own bundle (autotune/verl/keys.py). verl needs that shape
        (its workers take 1 CPU each, up to max_colocate_count of them per GPU), so it is never shrunk to fit."""
        return {"CPU": float(verl.RAY_POOL_BUNDLE_CPU), "GPU": 1.0}

    def node_resources(self) -> dict[str, dict[str, float]]:
        """Total resources of each alive node, by node address/id."""
        return {f"{n['NodeManagerAddress']}/{n['NodeID'][:8]}": n["Resources"] for n in self._ray.nodes()
                if n["Alive"]}

    def capacity(self, gpus_per_node: int, only: tuple[str, ...] | None = None) -> int:
        """How many per-node groups of `gpus_per_node` bundles the cluster holds at once (counting `only` these
        resources of the bundle, or all of them)."""
        need = {r: v * gpus_per_node for r, v in self.bundle().items() if only is None or r in only}
        return sum(min(int(res.get(r, 0.0) // v) for r, v in need.items())
                   for res in self.node_resources().values())

    def check(self, nodes: int, gpus_per_node: int) -> None:
        """Refuse a job the cluster can never hold, whatever resource of its bundles is short (instead of waiting
        forever for its placement groups)."""
        if self.capacity(gpus_per_node) >= nodes:
            return
        bundle = self.bundle()
        short = [r for r in bundle if self.capacity(gpus_per_node, (r,)) < nodes] or list(bundle)
        need = ", ".join(f"{v * gpus_per_node:g} {r}" for r, v in bundle.items())
        have = "; ".join(f"{node}: " + ", ".join(f"{res.get(r, 0.0):g} {r}" for r in bundle)
                         for node, res in self.node_resources().items()) or "none"
        todo = []
        if "CPU" in short:
            todo.append(f"start the nodes with more logical CPUs (Ray's count, not cores: `ray start --num-cpus "
                        f"{int(bundle['CPU'] * max(gpus_per_node, 8))}` on an 8-GPU node)")
        if "GPU" in short or len(todo) == 0:
            todo.append("add nodes")
        todo.append("or tune for a smaller --nodes/--gpus")
        raise ExecutorError(
            f"the Ray cluster at {self.gcs_address} cannot hold one trial of {nodes} node(s) x {gpus_per_node} GPUs: "
            f"short of {' and '.join(short)}. Each GPU of a trial is a bundle {_bundle_text(bundle)} (verl's own "
            f"shape), so each node of a trial needs {need}; alive nodes have {have}. To fix: {', '.join(todo)}")

    # Trials -------------------------------------------------------------------------------------------------
    def submit(self, spec: TrialSpec, runner: Runner) -> None:
        from ray.util.placement_group import placement_group

        gpn, nodes = spec.cluster.gpus_per_node, spec.cluster.nodes
        self.check(nodes, gpn)
        names = [group_name(spec.study, spec.number, i) for i in range(nodes)]
        bundle = self.bundle()
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
        unplaced = self._wait_ready(trial)
        if unplaced is not None:
            result = interrupted(runner, unplaced if trial.stop.is_set() else f"{unplaced}; re-queued on resume")
            if not trial.stop.is_set():  # every later trial has the same shape: the study stops and says why
                fatal = (f"trial {spec.number} could not be placed on the Ray cluster at {self.gcs_address}: "
                         f"{unplaced}. Run the same command again to resume once the cluster can hold it")
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

    def _wait_ready(self, trial: _Trial) -> str | None:
        """Wait until the trial's groups are placed: None, or why they are not (the executor stops the trial, Ray
        reports a group infeasible, or it stayed unplaced for placement_timeout_s while no other trial of this
        executor held its groups: waiting for our own trials to end is not counted against the deadline)."""
        refs = [g.ready() for g in trial.groups]
        last_look, infeasible_seen, waited_from = 0.0, 0, time.monotonic()
        while not trial.stop.is_set():
            ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0.2)
            if len(ready) == len(refs):
                return None
            now = time.monotonic()
            if now - last_look < 1.0:
                continue
            last_look = now
            with self._lock:
                if any(t is not trial and t.placement is not None and not t.finished for t in self._trials.values()):
                    waited_from = now  # one of ours holds GPUs: it ends (its watchdogs see to it), then we go on
            states = {n: _scheduling_state(g) for g, n in zip(trial.groups, trial.names, strict=True)}
            infeasible = [n for n, st in states.items() if st == "INFEASIBLE"]
            infeasible_seen = infeasible_seen + 1 if infeasible else 0
            shape = f"{trial.spec.cluster.gpus_per_node} bundles {_bundle_text(self.bundle())}"
            if infeasible_seen >= 2:  # twice a second apart: not a state of the moment
                return (f"not placed: Ray reports its placement group {infeasible[0]} infeasible: no alive node has "
                        f"{shape} in total (the cluster changed since the tuner started?)")
            if now - waited_from > self.placement_timeout_s:
                pending = ", ".join(sorted({st for st in states.values() if st})) or "pending"
                return (f"not placed: the Ray cluster did not free {trial.spec.cluster.nodes} x {shape} within "
                        f"{self.placement_timeout_s:g} s (Ray's scheduling state: {pending}; other jobs hold them?)")
        return trial.stop.reason

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
            block = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            try:
                done.append(self._done.get(timeout=block) if block > 0 else self._done.get_nowait())
                while True:
                    done.append(self._done.get_nowait())
            except queue.Empty:
                pass
            if done or not self._trials or (deadline is not None and time.monotonic() >= deadline):
                with self._lock:
                    for f in done:
                        self._trials.pop(f.number, None)
                return done

    def poll(self) -> list[Finished]:
        return self.wait(timeout=0)

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
