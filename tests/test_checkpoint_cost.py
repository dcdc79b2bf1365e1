"""Selective recompute's checkpoint, priced per layer and update micro-batch (Efficiency.selective_checkpoint_s), as
the real verl 0.9.1 trials measured it: the pairs of one host that differ only in it (benchmarks/cost_fits.py
fit_checkpoint_cost)."""

from __future__ import annotations

import pytest

from autotune.estimate.throughput import DEFAULT_EFFICIENCY
from benchmarks import calibration as cal
from benchmarks import cost_fits as fits

# The pairs that tell selective recompute's checkpoint from its FLOPs: one lease (one host), one size, the same
# configuration with and without it (steps 2 on). Lease 44 ran the 3B's core_attn by the CPU optimizer two by two;
# lease 45 the 1.5B's at 8k and 32k budgets and the 3B's at 16k, where the price was not fitted; lease 47 the 0.5B's
# core_attn,mlp at dyn16k/32k beside the same without it (0.5 ms).
CHECKPOINT_PAIRS = {(f"{lease}/{study}.db/{study}#{a}", f"{lease}/{other or study}.db/{other or study}#{b}")
                    for lease, study, a, other, b in (("h100_2026-11-26_l10", "c-3b", 3, "", 0),
                                                      ("h100_2026-11-27_l34", "c-3b-h10", 0, "", 2),
                                                      ("h100_2026-11-27_l35", "c-1.5b-h11", 1, "", 3),
                                                      ("h200_2026-11-26_l19", "c-1.5b-g1", 0, "c-1.5b-h", 2),
                                                      ("h200_2026-11-28_l44", "c-3b-h30", 0, "", 1),
                                                      ("h200_2026-11-28_l44", "c-3b-h30", 2, "", 3),
                                                      ("h200_2026-11-28_l45", "c-1.5b-h33", 0, "", 1),
                                                      ("h200_2026-11-28_l45", "c-1.5b-h33", 2, "", 3),
                                                      ("h200_2026-11-28_l45", "c-3b-h34", 0, "", 1),
                                                      ("h200_2026-11-28_l45", "c-3b-h34", 3, "", 1),
                                                      ("h200_2026-11-28_l47", "c-0.5b-h40", 1, "", 3),
                                                      ("h200_2026-11-28_l49", "c-1.5b-h46", 2, "", 4),
                                                      ("h200_2026-11-28_l49", "c-1.5b-h46", 3, "", 5),
                                                      # lease 61: its repeat of dyn12k/32k, a second study on the host
                                                      ("h100_2026-12-06_l61", "c-1.5b-h61", 3, "c-1.5b-h61b", 0))}


def test_selective_recompute_s_checkpoint_costs_what_the_pairs_fit(zeroed: list[cal.Case]) -> None:
    """selective_checkpoint_s is the fourteen pairs' fit (to 0.2 ms): the median of what each pair's update differs by
    beyond the model's difference, per checkpointed layer and micro-batch (-1.9-7.1 ms; 1.19 ms over ten, 1.16 ms since
    lease 47's 0.5B pair at 0.50 ms; lease 61's 1.5B on an H100 2.87 ms). On lease 44's host,
    core_attn's alone cost the 3B's 8k-budget update 1.8 s without the CPU optimizer and 1.1 s with it, where its FLOPs
    say 0.2 s: the checkpoint, not the CPU optimizer, is what the update paid. It is charged per layer and update
    micro-batch under selective recompute only, whatever the modules."""
    pairs = fits.checkpoint_pairs(zeroed)
    assert {(a.source, b.source) for a, b, _ in pairs} == CHECKPOINT_PAIRS
    assert DEFAULT_EFFICIENCY.selective_checkpoint_s == pytest.approx(fits.fit_checkpoint_cost(zeroed), abs=2e-4)
    lease44 = {a.source: r for a, _, r in pairs if "_l44/" in a.source}
    assert all(r > 0.001 for r in lease44.values())  # both above the FLOPs, with and without the CPU optimizer
    for c in cal.ok_cases(zeroed):
        assert (c.checkpointed_layers > 0) == ("rc:sel" in c.label), c.source
    three = next(a for a, _, _ in pairs if "_l44/" in a.source)
    assert three.checkpointed_layers == 36 * 20  # 36 layers, 20 update micro-batches of an 8k budget a step
