"""Parameter importance (Optuna's evaluators): computed in a worker process, so that a long computation over a large
study does not hold the server's interpreter (and every page load) while it runs; cached per study and evaluator,
recomputed once the completed trials have grown by 5% (or by any amount while there are few of them).
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
import warnings
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from sqlalchemy import func, select

from autotune.dashboard.data import _r
from autotune.store.schema import TrialRow
from autotune.store.store import Store

EVALUATORS = ("default", "fanova", "ped_anova", "mdi")
MIN_COMPLETE = 3
REFRESH_GROWTH = 0.05
_IMPORTANCE_CACHE: dict[tuple[str, str, str], dict[str, Any]] = {}
_IMPORTANCE_RUNNING: dict[tuple[str, str, str], Future] = {}
_IMPORTANCE_LOCK = threading.Lock()
_POOL: ProcessPoolExecutor | None = None


def _pool() -> ProcessPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                    initializer=_ignore_interrupts)
    return _POOL


def _ignore_interrupts() -> None:
    """In the worker: Ctrl-C reaches the whole process group, and the server ends its worker itself (shutdown);
    without this the worker prints its own KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def shutdown() -> None:
    """End the worker process (and with it Python's resource tracker, which lives while any process holds its
    pipe) when the server stops: left running, they hold the database open. A computation under way is not
    waited for."""
    global _POOL
    pool, _POOL = _POOL, None
    if pool is None:
        return
    procs = list((getattr(pool, "_processes", None) or {}).values())  # the stdlib keeps no public handle on them
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=5)


def n_ok(store: Store, study: str) -> int:
    with store.session() as s:
        return int(s.scalar(select(func.count()).where(TrialRow.study == study, TrialRow.status == "ok")) or 0)


def importance(url: str, study: str, evaluator: str, completed: int) -> dict[str, Any]:
    """optuna.importance.get_param_importances on the study; a message instead when it cannot be computed yet."""
    if evaluator not in EVALUATORS:
        return {"ok": False, "message": f"unknown evaluator {evaluator!r}; choose one of {', '.join(EVALUATORS)}"}
    if completed < MIN_COMPLETE:
        return {"ok": False, "message": f"{completed} completed trial(s): parameter importance needs at least "
                                        f"{MIN_COMPLETE}; it appears once more trials have run."}
    key = (url, study, evaluator)
    with _IMPORTANCE_LOCK:
        cached = _IMPORTANCE_CACHE.get(key)
        if cached and (cached["completed"] == completed or (
                completed > 100 and completed < cached["completed"] * (1 + REFRESH_GROWTH))):
            return cached
        fut = _IMPORTANCE_RUNNING.get(key)
        if fut is None:
            try:
                fut = _pool().submit(compute_importance, url, study, evaluator)
            except Exception:  # no worker process here (a restricted sandbox): compute in this one
                fut = Future()
                fut.set_result(compute_importance(url, study, evaluator))
            _IMPORTANCE_RUNNING[key] = fut
    try:
        res = {**fut.result(), "completed": completed}
    except Exception as e:
        res = {"ok": False, "message": f"parameter importance could not be computed: {type(e).__name__}: {e}",
               "completed": completed}
    with _IMPORTANCE_LOCK:
        _IMPORTANCE_RUNNING.pop(key, None)
        _IMPORTANCE_CACHE[key] = res
    return res


def compute_importance(url: str, study: str, evaluator: str) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = optuna.storages.RDBStorage(url, skip_table_creation=True)
        ostudy = optuna.load_study(study_name=study, storage=storage)
    except Exception as e:  # no Optuna study of that name (a database written by autotune's tables only)
        return {"ok": False, "message": f"no Optuna study {study!r} in this database ({type(e).__name__})"}
    complete = ostudy.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(complete) < MIN_COMPLETE:
        return {"ok": False, "message": f"{len(complete)} completed Optuna trial(s): parameter importance needs at "
                                        f"least {MIN_COMPLETE}."}
    ev = {
        "default": None,
        "fanova": lambda: optuna.importance.FanovaImportanceEvaluator(seed=0),
        "ped_anova": lambda: optuna.importance.PedAnovaImportanceEvaluator(),
        "mdi": lambda: optuna.importance.MeanDecreaseImpurityImportanceEvaluator(seed=0),
    }[evaluator]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            imp = optuna.importance.get_param_importances(ostudy, evaluator=ev() if ev else None)
    except Exception as e:  # too few distinct values, a missing optional dependency (scikit-learn for mdi)...
        return {"ok": False, "message": f"parameter importance could not be computed: {type(e).__name__}: {e}"}
    if not imp:
        return {"ok": False, "message": "no parameter varies over the completed trials yet"}
    name = type(ev()).__name__ if ev else "Optuna's default evaluator"
    return {"ok": True, "evaluator": name, "n_complete": len(complete),
            "importances": [[k, _r(v, 4)] for k, v in imp.items()]}
