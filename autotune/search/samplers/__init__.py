"""Optuna samplers of autotune's own (as Optuna keeps its samplers in optuna.samplers)."""

from autotune.search.samplers.model import ModelSampler

__all__ = ["ModelSampler"]
