"""The base time model against the committed real verl 0.9.1 trials (benchmarks/calibration.py), leave one model size
out: what the engine's fixed pass costs, the CPU optimizer priced per optimizer step and the local weight sync
achieved (issue 23), so it cannot silently regress."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable

import pytest

from autotune import verl
from autotune.estimate.throughput import DEFAULT_EFFICIENCY
from benchmarks import calibration as cal
from benchmarks import step_order
from benchmarks.real_cases import DATA

SIZES = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b")


@pytest.fixture(scope="module")
def held(zeroed: list[cal.Case]) -> list[cal.Case]:
    return cal.held_out(zeroed)[0]


def test_the_pass_costs_are_what_the_trials_fit(zeroed: list[cal.Case]) -> None:
    """One place per fact: the Efficiency constants are the fit on these trials (rounded), not a number beside it."""
    for name, value in cal.fit_pass_costs(zeroed).items():
        assert getattr(DEFAULT_EFFICIENCY, name) == pytest.approx(value, abs=0.1)


def test_full_recompute_costs_one_more_forward_pass(zeroed: list[cal.Case]) -> None:
    """Full recompute's second forward is priced as a log-prob pass (its FLOPs and logprob_pass_s): the eight trials
    with full recompute and no CPU optimizer leave about that above update_pass_s (2.5 s, the median, once the two
    without fused kernels pay their logits; 2.4 s before; 2.6 s over the seven before lease 25, 2.9 s over the six
    before lease 22), more on the H100 nodes (median 3.4 s: 3.4-3.7 s for the 0.5B and 1.5B, 3.8 s before their
    logits were priced, 2.4 s for lease 25's 3B with its optimizer offloaded) than on the H200s (median 1.6 s, 1.1-2.6
    s; lease 22's 3B with its optimizer offloaded 1.8 s), as their decode steps' host overhead is larger too: a spread
    the model does not price. Lease 36's pair on the 3B (one-GPU H200, optimizer offloaded and not) left 1.7 and 1.8 s:
    with update_pass_s refitted on every trial, the H100s' median is 2.9 s and the H200s' 1.5 s (1.9x). Lease 38's 1.5B
    with full recompute on a one-GPU H200 (c-1.5b-h15 #2, updates of 12.3-13.8 s over steps 2-4) left 4.7 s, the most
    of the H200s': their median 1.8 s, the H100s' 2.9 s (1.7x). Lease 32's
    0.5B (rc:full on an H200, on the node whose small models' updates ran 10-30% slow: HOST_MISSES) left 6.3 s, the
    most of any, and lease 33's (the same on a second four-lane H200 node) 5.1 s: their hosts', out of the per-GPU
    comparison, as lease 41's (a two-lane H200 node) 5.9 s, and lease 46's (another) 3.8 s; that node's 1.5B left 2.4
    s, within the H100s' spread, and lease 48's 1.5B (another, read from its files: the lease's deadline cut it after
    its step 4) 1.6 s; lease 49's 1.5B on a one-GPU H200 (c-1.5b-h46 #1) 1.7 s, the H200s' median 1.6 s.
    Lease 20's two-by-two on the 1.5B (H200) says the cost is the recompute's and not the 8k token budget every
    earlier full-recompute trial also had: without recompute the budgets' updates differ by 0.3 s, with it they cost
    2.1-2.8 s more, where the model said 1.0-1.2 s before it priced the second forward's fixed cost (3.4-3.5 s now)."""
    costs = cal.fit_pass_costs(zeroed)
    assert cal.recompute_residual(zeroed, costs["update_pass_s"]) == pytest.approx(
        DEFAULT_EFFICIENCY.logprob_pass_s, rel=0.25)
    residuals = cal.recompute_residuals(zeroed, costs["update_pass_s"])
    per_gpu = {g: [r for c, r in residuals if c.gpu == g and c.source not in HOST_MISSES] for g in ("h100", "h200")}
    assert (len(per_gpu["h100"]), len(per_gpu["h200"])) == (4, 8)
    assert statistics.median(per_gpu["h100"]) > 1.6 * statistics.median(per_gpu["h200"])
    slow = [r for c, r in residuals  # leases 32's, 33's, 41's and 46's 0.5B on multi-lane nodes
            if c.source in HOST_MISSES and c.size == "qwen2.5-0.5b"]
    assert len(slow) == 4 and min(slow) > max(per_gpu["h100"])
    two_by_two = {c.source.rsplit("#", 1)[1]: cal.steady(c)
                  for c in cal.cases([DATA / "h200_2026-11-26_l20" / "c-1.5b-rc.db"])}
    assert len(two_by_two) == 4
    update = {n: (c.measured_phases["update_actor"], c.predicted_phases["update_actor"]) for n, c in two_by_two.items()}
    assert abs(update["1"][0] - update["3"][0]) < 0.5 and abs(update["1"][1] - update["3"][1]) < 0.5  # 8k vs 16k
    for full, none in (("0", "1"), ("2", "3")):  # 8k and 16k token budgets
        assert two_by_two[full].label.split()[2] == "rc:full:u1" and "rc:" not in two_by_two[none].label
        measured = update[full][0] - update[none][0]
        predicted = update[full][1] - update[none][1]
        flops_only = predicted - DEFAULT_EFFICIENCY.logprob_pass_s
        assert 2.0 < measured < 3.0 and flops_only < 1.5 and predicted == pytest.approx(measured, abs=1.5)


def test_the_cpu_optimizer_does_not_hide_full_recompute_on_one_host() -> None:
    """Lease 49 (a one-GPU H200) ran the 1.5B's recompute none / selective [core_attn,mlp] / full at dyn16k/32k, each
    with half the optimizer on the CPU and without it. Over steps 2-4 full recompute cost the update 2.8 s over none
    with the CPU optimizer and 3.4 s without, the model 3.3 s both: the CPU optimizer's step does not hide the second
    forward's fixed cost, so the 7B's full recompute (1 s over selective where the model says 4 s, lease 48) is not
    that; the model keeps one price. The CPU optimizer cost 2.5-3.6 s a step: the model said 2.4 s at the
    microbenchmark's rate, 2.9 s at the pairs' (test_the_cpu_optimizers_rate_is_what_the_pairs_on_one_host_fit)."""
    cs = {c.source.rsplit("#", 1)[1]: cal.steady(c)
          for c in cal.cases([DATA / "h200_2026-11-28_l49" / "c-1.5b-h46.db"])}
    assert [cs[n].label for n in "024"] == [
        f"tp1 rtp1 {rc}dyn16k/32k util0.5 cpu-adam0.5" for rc in ("rc:full:u1 ", "rc:sel:core_attn,mlp ", "")]
    assert all(cs[str(n + 1)].label == cs[str(n)].label.removesuffix(" cpu-adam0.5") for n in (0, 2, 4))
    update = {n: (c.measured_phases["update_actor"], c.predicted_phases["update_actor"]) for n, c in cs.items()}

    def over(a: str, b: str) -> tuple[float, float]:  # what a's update costs over b's: measured, predicted
        return update[a][0] - update[b][0], update[a][1] - update[b][1]

    with_cpu, without = over("0", "4"), over("1", "5")
    assert abs(with_cpu[0] - without[0]) < 1.0 and with_cpu[0] > 2.0
    for measured, predicted in (with_cpu, without):
        assert predicted == pytest.approx(measured, abs=0.6)
    for cpu, gpu in (("0", "1"), ("2", "3"), ("4", "5")):
        measured, predicted = over(cpu, gpu)
        assert 2.0 < predicted and abs(measured - predicted) < 0.8


def test_the_7bs_full_recompute_on_one_host_costs_less_than_priced_and_orders_as_priced() -> None:
    """Lease 50 (a one-GPU H200) ran the 7B job's pick (selective [core_attn,mlp] at dyn24k/96k) and full recompute at
    dyn16k/96k and dyn24k/96k on one host, all with the parameters offloaded and half the optimizer on the CPU. Over
    steps 2-4 full recompute cost the update 1.9 and 1.2 s over the pick; the model says 3.7 and 3.3 s. Its second
    forward's fixed cost (a log-prob pass, 2.3 s) is what the 1.5B pays on one host (lease 49), and about half of it
    is what the 7B pays: a 7B layer's GPU work may hide what the host spends on it (as with its small micro-batches,
    Efficiency.small_micro_batch_s). Three trials of one size, one host: known, not priced; the order holds."""
    cs = {c.source.rsplit("#", 1)[1]: cal.steady(c)
          for c in cal.cases([DATA / "h200_2026-11-29_l50" / "c-7b-h45.db"])}
    assert [cs[n].label for n in "012"] == [f"tp1 rtp1 {rc} util0.4 offload:params cpu-adam0.5" for rc in (
        "rc:sel:core_attn,mlp dyn24k/96k", "rc:full:u1 dyn16k/96k", "rc:full:u1 dyn24k/96k")]
    update = {n: (c.measured_phases["update_actor"], c.predicted_phases["update_actor"]) for n, c in cs.items()}
    for full in "12":
        measured, predicted = (update[full][i] - update["0"][i] for i in (0, 1))
        assert 1.0 < measured < 2.0 and 3.0 < predicted < 4.0
        assert predicted - measured < 0.07 * update[full][0]  # over by under 7 % of the update
    steps = {n: (c.measured_step_s, c.predicted_step_s) for n, c in cs.items()}
    assert min(steps, key=lambda n: steps[n][0]) == min(steps, key=lambda n: steps[n][1]) == "0"


def test_the_7b_leaves_less_above_its_flops_than_the_smaller_sizes(zeroed: list[cal.Case]) -> None:
    """calibration.md "What a pass leaves above its FLOPs, by size": the 0.5B-3B leave 2.2-2.8 s above a log-prob
    pass's FLOPs on either GPU type (the model's logprob_pass_s, 2.27 s, their fit), the 7B 0.85 s over its seventeen;
    on one host the 1.5B's and 3B's full recompute leaves the log-prob pass the model charges for its second forward
    (2.2 and 2.3 s on the H200s), the 7B's 1.2 s (lease 50). The model charges every size alike: the 7B's
    old_log_prob is its one phase over the target's reach held out (21 %)."""
    rows = {tuple(cells[:2]): cells[2:] for line in cal.fixed_costs(zeroed) if line.startswith("| qwen")
            for cells in [[x.strip() for x in line.strip("|").split("|")]]}

    def value(cell: str) -> float:
        return float(cell.split()[0])

    small = [value(r[0]) for (size, _), r in rows.items() if size != "qwen2.5-7b"]
    assert len(small) == 6 and 2.0 < min(small) and max(small) < 3.0
    assert min(small) > 2 * value(rows["qwen2.5-7b", "h200"][0])
    for size in ("qwen2.5-1.5b", "qwen2.5-3b"):
        assert value(rows[size, "h200"][3]) == pytest.approx(DEFAULT_EFFICIENCY.logprob_pass_s, abs=0.3)
    assert value(rows["qwen2.5-7b", "h200"][3]) < DEFAULT_EFFICIENCY.logprob_pass_s / 1.5


def test_the_cpu_optimizers_rate_is_what_the_pairs_on_one_host_fit(zeroed: list[cal.Case]) -> None:
    """cpu_adam_params_per_s is the median (to 2 %) of what the five pairs with Megatron's CPU optimizer and without it
    on one host say: lease 44's 3B and lease 49's 1.5B, 4.3e8-6.2e8 parameters a second (the model had 6.5e8, the
    slower host's microbenchmark, and put every such pair's difference 0.2-1.3 s under). Held out, each size takes the
    other sizes' pairs."""
    pairs = cal.cpu_adam_pairs(zeroed)
    assert sorted(a.source.split("/")[1] for a, _, _ in pairs) == ["c-1.5b-h46.db"] * 3 + ["c-3b-h30.db"] * 2
    rates = [r for _, _, r in pairs]
    assert 4.0e8 < min(rates) and max(rates) < 6.5e8
    assert DEFAULT_EFFICIENCY.cpu_adam_params_per_s == pytest.approx(cal.fit_cpu_adam_rate(zeroed), rel=0.02)
    _, fits = cal.held_out(zeroed)
    three = [c for c in zeroed if c.size != "qwen2.5-3b"]
    assert fits["qwen2.5-3b"]["cpu_adam_params_per_s"] == pytest.approx(cal.fit_cpu_adam_rate(three))


def test_a_logit_without_fused_kernels_costs_what_the_sixteen_trials_fit(zeroed: list[cal.Case]) -> None:
    """unfused_logit_ps is the fit (to 1 ps) over the sixteen trials without fused kernels (0.5B and 1.5B on H100s,
    leases 32's, 33's, 38's and 48's 1.5B on H200s: 66, 71, 30 and 32 ps, lease 46's 0.5B on an H200: 31 ps), each
    against the trials with them of its size, GPU type and attention backend: their log-prob passes ran ~1 s (0.7-1.1
    s by group) over those with fused kernels at ~2.3e10 logits a step. Every other trial pays nothing."""
    costs = cal.logit_costs(zeroed)
    assert DEFAULT_EFFICIENCY.unfused_logit_ps == pytest.approx(cal.fit_logit_cost(zeroed), abs=1.0)
    assert len(costs) == 16 and all("no-fused" in c.label for c, _ in costs)
    assert [c.source for c, _ in costs if c.gpu != "h100"] == ["h200_2026-11-27_l32/c-1.5b-h7.db/c-1.5b-h7#0",
                                                               "h200_2026-11-27_l33/c-1.5b-h8.db/c-1.5b-h8#0",
                                                               "h200_2026-11-27_l38/c-1.5b-h15.db/c-1.5b-h15#4",
                                                               "h200_2026-11-28_l46/c-0.5b-h35.db/c-0.5b-h35#4",
                                                               "h200_2026-11-28_l48/c-1.5b-h44.db/c-1.5b-h44#3"]
    assert {c.source for c, _ in costs} == {c.source for c in cal.ok_cases(zeroed) if c.unfused_logits}
    assert all(bool(c.unfused_logits) == ("no-fused" in c.label) for c in cal.ok_cases(zeroed))


def test_the_decode_step_overheads_are_what_the_trials_fit(zeroed: list[cal.Case]) -> None:
    """Per GPU type, the decode step's overhead with CUDA graphs is the trials' fit (to 0.1 ms), and a GPU type the
    trials never ran takes the H100's."""
    fit = cal.fit_decode_overhead(zeroed)
    assert set(fit) == {"h100", "h200"}
    for gpu, value in fit.items():
        assert DEFAULT_EFFICIENCY.decode_step_overhead(gpu, eager=False) == pytest.approx(value, abs=1e-4)
    eff = DEFAULT_EFFICIENCY
    assert eff.decode_step_overhead("b200", eager=False) == eff.decode_step_overhead_graph_s
    assert eff.decode_step_overhead("h200", eager=True) == eff.decode_step_overhead_s


def test_a_decode_step_takes_the_hosts_overhead_where_the_gpus_replay_is_shorter(zeroed: list[cal.Case],
                                                                               held: list[cal.Case]) -> None:
    """With CUDA graphs vLLM schedules the next decode step on the host while the GPU replays this one, so a step
    takes the longer of the two. Every real trial's decode steps outlasted its GPU's predicted work (host-bound), and
    the H100's 0.5B, 1.5B and 3B measured one gen (8.1 s median each), where adding the GPU's work to the host's put
    them at 8.1, 9.5 and 11.1 s. Held out, each size's predicted gen within 5% of its median measured one (each trial's
    gen is its rollout rounded up to verl's 2 s poll: the 1.5B's nine measured 6.1 s three times, 10.1 s twice), and
    every size's gen on either GPU type within the phase target (the H200's one-GPU and four-lane nodes differ by a
    poll interval: 6.1 against 8.1 s)."""
    steps = cal.decode_step_times(zeroed)
    assert len(steps) == len(cal.ok_cases(zeroed)) == 186
    assert all(step > c.decode_gpu_step_s > 0 for c, step in steps)
    for size in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b"):
        h100 = [c for c in cal.ok_cases(held) if c.size == size and c.gpu == "h100"]
        measured = statistics.median(c.measured_phases["gen"] for c in h100)
        assert measured == pytest.approx(8.1, abs=0.05)
        assert statistics.median(c.predicted_phases["gen"] for c in h100) == pytest.approx(measured, rel=0.05), size
    for size in {c.size for c in held}:
        assert cal.errors([c for c in held if c.size == size]).phases["gen"] <= cal.PHASE_TARGET, size


def test_held_out_every_phase_and_the_step_meet_the_targets_over_all_sizes(held: list[cal.Case]) -> None:
    """Every phase, the step and the ordering over all sizes, held out: since lease 20 (full recompute's second
    forward priced) gen too, at 15% with the decode step's overhead refitted without each size (73 trials since lease
    32's fourteen on an H200 node, 17% over the 59 before; 58 trials since lease
    28's four and lease 29's two 0.5B trials, 52 since lease 27's 0.5B trial through the kept Ray head, 51 since lease
    26's four 1.5B trials on an H100, 47 since lease 25's three 3B trials, 18% over the 44 before; the step 7% since
    the logits of the passes without fused kernels are priced, 8% before, 7% over the 51; old_log_prob 11%, 17%
    before, 13% over the 52; Spearman 0.92 over them all, 0.93 before, 0.94 over the 52, 0.93 before lease 27, 0.92
    before lease 25, 0.81 before micro-batches of one sequence were priced; since lease 32 the step 8%, old_log_prob
    10%, Spearman 0.91, 0.93 since the small micro-batches are priced, the step 8% still, update_actor 8%; 88 trials
    since lease 33's fifteen on a second four-lane H200 node: gen 15%, old_log_prob 10%, update_actor 8%, weight sync
    15%, the step 8%, Spearman 0.91; 92 since lease 34's four 3B trials on an H100, with the host's decode overhead
    hidden under the GPU's replay where that is longer: gen 3%, old_log_prob 10%, update_actor 8%, weight sync 15%,
    the step 7%, Spearman 0.92; 161 since lease 46's eleven on a two-lane H200 node: gen 16%, old_log_prob 12%,
    update_actor 9%, weight sync 16%, the step 9%, Spearman 0.90; 169 since lease 47's eight on another: gen 16%,
    old_log_prob 12%, update_actor 9%, weight sync 16%, the step 9%, Spearman 0.91; 177 since lease 48's eight on
    another: gen 16%, old_log_prob 12%, update_actor 8%, weight sync 16%, the step 10%, Spearman 0.91)."""
    fit = cal.errors(held)
    assert fit.trials == 186
    assert all(v <= cal.PHASE_TARGET for v in fit.phases.values()), fit.phases
    assert fit.step is not None and fit.step <= cal.STEP_TARGET
    assert fit.rho is not None and fit.rho >= cal.SPEARMAN_TARGET


STEP_NOISE = 0.11  # the least step-to-step spread of one trial's steps on the real trials (11-18%)
MODEL_TIE = 0.01  # two predictions this close are a tie the model cannot order
# Known misses, each a phase the base model does not meet the target in yet (issue 23 stays open on them), held out.
# gen: verl's 2 s poll rounds each trial's rollout up (6.1, 8.1, 10.1 s ...), one interval being 2 ms a decode step,
# and the per-step overhead the trials imply differs by size: 0.5B 6-8 ms, 1.5B 2.8-4.8 ms and 3B 2.8-6.7 ms on the
# H100 nodes, 1.5B 3.3-5.2 ms and 3B 1.5-3.4 ms on the H200s (lease 22's six up to 7.3 ms: each gen 8.1 s, one
# poll interval over most H200 trials'). The 1.5B held out is predicted with the others' fit: 6.6 ms on the H100
# after lease 24's four 0.5B trials at 6.1-8.1 ms put it at 26.8% (29.7% before lease 24, at 7.1 ms); lease 25's
# three 3B trials on an H100, whose gens ran in 8.1-10.1 s against 11.1 s predicted, take the others' fit to 6.1 ms
# and the 1.5B's gen to 23.8%: within the target, no longer a known miss. The 0.5B with theirs (4.8 ms on the H100,
# since lease 21's 1.5B) was 25.5% over lease 3's and 4's eight trials; lease 24's four, whose gens ran in 8.1 s
# (three) and 10.1 s as lease 4's did, bring it to 17.3%: within the target since. 7B's old_log_prob (leases 13 and
# 20, H200): the forward passes ran faster than the H100-fitted compute share (x0.77); 28% held out since the passes
# without fused kernels pay their logits (unfused_logit_ps), 32% before, when their ~1 s a pass lifted the others' fit
# of logprob_pass_s to 2.63 s (2.35 s since). Lease 32's two 7B trials (7.2 and 6.9 s against 8.3 and 8.2 s
# predicted) bring it to 21%: within the target, no longer a known miss.
KNOWN: dict[tuple[str, str], float] = {}
# The three trials with micro-batches of one sequence (1 for the update, 4 for the log-prob, no dynamic batching):
# lease 22's 1.5B on an H200 and lease 24's 0.5B on an H100, known step misses until their micro-batches were priced
# (micro_batch_of_one_s; the 1.5B's update_actor 28.4 s measured, 10.6 s predicted held out, its step 42.2 vs 20.8 s:
# the H200's slowest 1.5B step predicted among the middle, Spearman 0.79 over thirteen trials; the 0.5B's 27.0 vs
# 6.5 s, its step 41.2 vs 16.6 s, Spearman 0.87 over twelve), and lease 25's 3B on an H100 (optimizer offloaded), the
# price's test at a third size: held out, with the 0.5B's and 1.5B's fit, its update 38.5 s against 37.6 measured.
# Lease 26's 1.5B on an H100 (c-1.5b-h4 #0) is a fourth: priced before it ran, its update took 30.4 s against 30.1.
# Lease 46's two-lane H200 node ran the 0.5B's and the 1.5B's (c-0.5b-h35 #2, c-1.5b-h36 #2), priced at 0.146 s before
# they ran: their updates 22.6 and 25.1 s against 25.3 and 29.0 s (0.125 and 0.116 s a micro-batch; the six's 0.142 s).
MICRO_BATCHES_OF_ONE = ("h200_2026-11-26_l22/c-1.5b-h2.db/c-1.5b-h2#2", "h100_2026-11-26_l24/c-0.5b-bc.db/c-0.5b-bc#4",
                        "h100_2026-11-27_l25/c-3b-h3.db/c-3b-h3#1", "h100_2026-11-27_l26/c-1.5b-h4.db/c-1.5b-h4#0",
                        "h200_2026-11-28_l46/c-0.5b-h35.db/c-0.5b-h35#2",
                        "h200_2026-11-28_l46/c-1.5b-h36.db/c-1.5b-h36#2")


def test_a_micro_batch_of_one_sequence_costs_what_the_six_trials_fit(zeroed: list[cal.Case],
                                                                      held: list[cal.Case]) -> None:
    """micro_batch_of_one_s is the six trials' fit (0.142 s: 0.142 s a micro-batch on the 1.5B on an H200, 0.148 s on
    the 1.5B on an H100, 0.157 s on the 0.5B and 0.143 s on the 3B on H100s, 0.125 and 0.116 s on lease 46's 0.5B and
    1.5B on a two-lane H200 node; 0.146 s over the four before lease 46), and each size's figure predicts the others':
    held out, each trial's update is within the phase target (the 1.5B's three 0%, -2% and +14%, the 0.5B's -7% and
    +10%, the 3B's 0%) and its step within the step target (the 1.5B's -3%, -4% and +4%, the 0.5B's -11% and 0%, the
    3B's -5%). Nothing else is priced by it: every other trial has no micro-batch of one sequence."""
    update_pass_s = cal.fit_pass_costs(zeroed)["update_pass_s"]
    assert DEFAULT_EFFICIENCY.micro_batch_of_one_s == pytest.approx(
        cal.fit_micro_batch_cost(zeroed, update_pass_s), abs=0.005)
    assert sorted(c.source for c, _ in cal.micro_batch_costs(zeroed, update_pass_s)) == sorted(MICRO_BATCHES_OF_ONE)
    assert {c.source for c in zeroed if c.micro_batches_of_one} == set(MICRO_BATCHES_OF_ONE)
    one = {c.source: c for c in cal.ok_cases(held) if c.source in MICRO_BATCHES_OF_ONE}
    assert len(one) == 6
    for c in one.values():
        assert c.micro_batches_of_one == 128  # 128 sequences a step, 64 a mini-batch
        update = c.predicted_phases["update_actor"] / c.measured_phases["update_actor"] - 1
        assert abs(update) <= cal.PHASE_TARGET, (c.source, update)
        assert abs(c.predicted_step_s / c.measured_step_s - 1) <= cal.STEP_TARGET, c.source


def _trials(lease: str, study: str, numbers: Iterable[int]) -> set[str]:
    """Case sources of a study's trials: "<lease>/<study>.db/<study>#<n>"."""
    return {f"{lease}/{study}.db/{study}#{n}" for n in numbers}


# Update micro-batches under 4.5k tokens that are not single sequences (throughput.small_micro_batches), priced per
# micro-batch since lease 32 ran them at a third size: fixed ones of 2 sequences (64 a step, 2.4k tokens) on the 0.5B
# (lease 29, H100), the 1.5B (lease 26, H100) and the 3B (lease 32's slow H200 node), and 4k dynamic budgets (38 a step)
# on the same three and on lease 3b's 0.5B with unfused attention; lease 33 ran the 3B's two once more on a second
# four-lane H200 node (0.071 and 0.111 s a micro-batch, lease 32's node 0.101 and 0.178 s). Unpriced (as larger
# micro-batches, nothing), they were known misses out of update_pass_s's fit, held out their updates 32-53% under and
# their steps 2-36% under (the unfused one's update 0%, its step 6% under).
SMALL_MICRO_BATCHES = {"h100_2026-11-24_l3/smoke_l3b.db/smoke-h100-b#1", "h100_2026-11-27_l26/c-1.5b-h4.db/c-1.5b-h4#2",
                       "h100_2026-11-27_l26/c-1.5b-h4.db/c-1.5b-h4#3", "h100_2026-11-27_l29/c-0.5b-mb.db/c-0.5b-mb#0",
                       "h100_2026-11-27_l29/c-0.5b-mb.db/c-0.5b-mb#1", "h200_2026-11-27_l32/c-3b-mb.db/c-3b-mb#0",
                       "h200_2026-11-27_l32/c-3b-mb.db/c-3b-mb#1", "h200_2026-11-27_l33/c-3b-mb2.db/c-3b-mb2#0",
                       "h200_2026-11-27_l33/c-3b-mb2.db/c-3b-mb2#1", "h100_2026-11-27_l35/c-1.5b-h11.db/c-1.5b-h11#4",
                       *_trials("h200_2026-11-27_l41", "c-0.5b-h19", (1, 2)),
                       *_trials("h200_2026-11-27_l41", "c-1.5b-h20", (1, 2)),
                       "h200_2026-11-28_l42/c-3b-h24.db/c-3b-h24#1",
                       "h200_2026-11-28_l43/c-3b-h27.db/c-3b-h27#1", "h200_2026-11-28_l47/c-0.5b-h40.db/c-0.5b-h40#4",
                       *_trials("h200_2026-11-28_l48", "c-1.5b-h44", (1, 2))}
# Priced, one misses a target held out, named with what it misses and a bound over its error (predicted / measured
# - 1): lease 3b's 0.5B with a 4k budget ran unfused attention, whose long GPU work per micro-batch (0.32 s, the
# model's) hid the cost (0.002 s a micro-batch): its update is priced 33% over, its step 15%. Lease 26's 1.5B at
# micro-batches of 2 measured its step 3 in 24.2 s, its fastest (steps 2 and 4: 29.6 and 31.3 s; gen 6.1 s where they
# took 8.1 and 10.1 s, update 13.8 s where they took 16.0 and 16.5 s): its step was 26% over until the host's decode
# overhead hid under the GPU's replay (lease 34's gen), 19.9% since, its update 18%; 21% (update 20%) since lease 41's
# slow two-lane node lifted the fixed micro-batches' fit from 0.101 to 0.111 s: a known step miss again. That node's
# 1.5B at micro-batches of 2 (c-1.5b-h20 #1) ran its updates 18.0-19.6 s over steps 2-4, the model 15.4 s: its step
# 20.1% under held out, until lease 42's 3B at micro-batches of 2 (0.142 s a micro-batch, the optimizer offloaded)
# joined the other sizes' fit: 19.0% under since, within the target. Lease 47's 0.5B at micro-batches of 2 (0.141 s a
# micro-batch on a two-lane node) lifted the fit without the 1.5B from 0.111 to 0.126 s: lease 26's 1.5B's update is
# priced 30% over and its step 27%, and lease 33's 3B at micro-batches of 2 (0.071 s a micro-batch; KNOWN_OUTLIERS)
# its step 20.3% over (update 19.6%); lease 48's 1.5B at micro-batches of 2 (0.121 s) took it back to 18.9 %, within
# the target. Lease 48's 1.5B at a 4k budget measured its step 3 in 33.8 s, its step 4 in 23.8 s (gen 12.2 against
# 6.1 s, update 16.0 against 12.7 s): its step is 21 % under held out.
SMALL_MISSES = {"h100_2026-11-24_l3/smoke_l3b.db/smoke-h100-b#1": {"update_actor": 0.36},
                "h100_2026-11-27_l26/c-1.5b-h4.db/c-1.5b-h4#2": {"update_actor": 0.32, "step": 0.29},
                "h200_2026-11-28_l48/c-1.5b-h44.db/c-1.5b-h44#1": {"step": 0.22}}


def test_small_micro_batches_cost_what_the_trials_fit(zeroed: list[cal.Case]) -> None:
    """small_micro_batch_s and small_budget_micro_batch_s are the fit (to 5 ms): per kind the median over its trials
    of what each update leaves above update_pass_s per micro-batch (fixed micro-batches of 2: 0.112, 0.063,
    0.101 and 0.071 s on the 0.5B, 1.5B and the 3B on two nodes: 0.086 s; a 4k budget: 0.142, 0.152, 0.178 and 0.111
    s on the same, and 0.002 s on the unfused 0.5B: 0.142 s; lease 41's two-lane node added both kinds on the 0.5B and
    1.5B, 0.153-0.183 s, and lease 35 a second 1.5B at micro-batches of 2: 0.111 and 0.149 s). The two kinds measured
    apart: on each of the six nodes' pairs, the fused 4k budget's micro-batch cost more than the micro-batch of 2
    beside it, and the median by 0.03 s at least. Nothing else
    pays them: every other trial's micro-batches are single sequences or of 4.5k tokens or more."""
    update_pass_s = cal.fit_pass_costs(zeroed)["update_pass_s"]
    fit = cal.fit_small_micro_batch_costs(zeroed, update_pass_s)
    assert set(fit) == set(cal.SMALL_COSTS.values())
    for name, value in fit.items():
        assert getattr(DEFAULT_EFFICIENCY, name) == pytest.approx(value, abs=0.005)
    costs = cal.small_micro_batch_costs(zeroed, update_pass_s)
    # and lease 48's 7B at micro-batches of 2, its optimizer on the CPU as no update in the fit has (it left -0.02 s)
    cpu_adam = {"h200_2026-11-28_l48/c-7b-h43.db/c-7b-h43#1"}
    assert {c.source for c, _ in costs} == SMALL_MICRO_BATCHES == {c.source for c in zeroed if c.small_micro_batches
                                                                   } - cpu_adam
    assert all(c.cpu_optimizer for c in zeroed if c.source in cpu_adam)
    for c, _ in costs:
        assert (c.small_kind, c.small_micro_batches) == (("fixed", 64) if "mbs2/" in c.label else ("dynamic", 38))
    fixed = [r for c, r in costs if c.small_kind == "fixed"]
    fused_budget = [r for c, r in costs if c.small_kind == "dynamic" and "no-fused" not in c.label]
    assert (len(fixed), len(fused_budget)) == (10, 8)
    assert statistics.median(fused_budget) > statistics.median(fixed) + 0.03
    pairs = {}
    for c, r in costs:
        if "no-fused" not in c.label:
            pairs.setdefault(c.source.split("#")[0], {})[c.small_kind] = r
    pairs = {k: p for k, p in pairs.items() if len(p) == 2}  # lease 35 re-ran lease 26's micro-batches of 2 alone
    assert len(pairs) == 7 and all(p["dynamic"] > p["fixed"] for p in pairs.values())


def test_held_out_small_micro_batches_meet_the_targets_but_those_named(held: list[cal.Case]) -> None:
    """Held out (each size with the other sizes' fit), every small-micro-batch trial's update is within the phase
    target (20% at most: lease 29's 0.5B at micro-batches of 2, the other sizes' fit 0.071 s against its 0.112 s) and
    its step within the step target but SMALL_MISSES, each
    missing only what it names, by less than its bound."""
    small = [c for c in cal.ok_cases(held) if c.source in SMALL_MICRO_BATCHES]
    assert len(small) == len(SMALL_MICRO_BATCHES)
    for c in small:
        err = {"update_actor": c.predicted_phases["update_actor"] / c.measured_phases["update_actor"] - 1,
               "step": c.predicted_step_s / c.measured_step_s - 1}
        target = {"update_actor": cal.PHASE_TARGET, "step": cal.STEP_TARGET}
        missed = {k for k, e in err.items() if abs(e) > target[k]}
        if c.source in SMALL_MISSES:
            bounds = SMALL_MISSES[c.source]
            assert missed == set(bounds) and all(abs(err[k]) < b for k, b in bounds.items()), (c.source, err)
        else:
            assert not missed, (c.source, err)


# Known ordering misses across hosts of one GPU type: lease 10's three 3B trials with half the optimizer on the CPU
# (cpu-adam0.5) ran their updates 4.7-5.9 s over the model on that lease's H100 host (21.9-23.4 s against 17.2-17.7
# held out), where lease 25's H100 host ran the whole optimizer's CPU Adam as priced (c-3b-h3 #2: update 26.3 s
# against 26.4, with full recompute; its #0, the same without the CPU optimizer, 18.2 against 18.4). So lease 10's
# three measured 25-35% slower than lease 25's #0, which the model puts 1-3.5% slower than them, and 7-15% slower
# than lease 25's #2, which it puts 24-27% slower. Lease 30 told the host from the half-split optimizer: lease 10's
# #0 once more on another H100 host (c-3b-h5 #0, the same configuration) ran its step in 32.9 s against 45.7 s on
# lease 10's (gen 8.1 vs 18.1 s, update 18.6 vs 21.9 s), 5% under the model's 34.5 s held out; that host's CPU AdamW
# ran 8.4e8 parameters/s (the model's 6.5e8 then). So lease 10's host, not the split. Without the three the H100's 3B is
# ordered (1.00 over the other five).
# Lease 32's H200 node (four lanes, 2026-11-27): the same configurations as on other nodes, its 0.5B-3B updates ran
# 10-30% slower (the 1.5B with selective recompute 10.0 s against lease 19's 8.3 s, its step 22.1 against 19.0 s; the
# 3B at micro-batches of 4 with half the optimizer on the CPU 21.0 against 17.7 s; the 0.5B at dyn32k/96k 7.4 s against
# 5.0-5.8 s on four H100 trials), its steps 3 and 4 up to 27% apart, while its 7B ran as lease 13's (update 35.7
# against 35.2 s): a host slow where the GPU waits on the CPU. Its twelve 0.5B-3B trials order among themselves, not
# against other nodes' (as lease 10's three). Lease 33 ran lease 32's plan on a second four-lane H200 node: its 1.5B and
# 3B ran 6-15% faster than lease 32's (the 3B's micro-batches of 4 18.0 s against 21.0 s), still over one-GPU nodes'
# (the 1.5B's selective recompute 8.8 s against lease 19's 8.3 s), its 0.5B as lease 32's, and its steps as noisy (the
# 1.5B at dyn12k/96k: updates of 7.6, 12.7 and 7.3 s over steps 2-4): four lanes share a host whose small models wait on
# it, other lanes' start-ups among what they wait for. Its fifteen 0.5B-3B trials are compared among themselves only;
# there the two nodes' eight 1.5B and nine 3B are at -0.37 and -0.10 (held out), each misordered pair within a step's
# noise or with a known outlier, where the H200's thirteen 1.5B and seven 3B off them are at 0.93 and 0.89.
# Lease 35's one-GPU H100 host ran lease 11's 1.5B first launch (dyn12k/96k) 22% slower than lease 11's host did (its
# update 10.2 s against 8.1 s at the same tokens), and every 1.5B update of its five 14-26% over the model (the
# micro-batches of 2, 6%), where lease 11's and lease 5's hosts ran theirs 2% under to 3% over: a host slow where the
# GPU waits on it. Its five order among themselves (0.70 at step 3 held out, 0.90 over the steady steps; the H100's
# 1.5B over fourteen 0.61, 0.84 over the steady steps, 0.77 over the nine before).
# Lease 40's one-GPU H200 rolled the 0.5B out in 10.1 s at five of its six steps 2-4 (6.1 s on lease 39's host, two
# more 2 s polls of verl's replay buffer) and the 1.5B in 8.1 s (6.1 s on lease 38's); its 1.5B at dyn36k, the same
# three ~25k micro-batches as lease 38's dyn32k, ran step 3 28% slower (21.4 s against 16.7 s; update 8.0 against 6.3).
# Lease 41's two-lane H200 node (both GPUs busy, 16 cores each) ran the 0.5B and 1.5B as the four-lane nodes of leases
# 32 and 33 did: their dyn32k/96k, the one-GPU H200s' fastest, in 23.0 and 24.2 s a step (13.4-16.7 s there), gen
# 8.1-12.2 s, updates 15-45% over the model. Each lane's study orders as the model does (Spearman 0.90 over the 0.5B's
# five, 1.00 over the 1.5B's four: calibration.md, "How far a measured step can be ordered"). Lease 42's two-lane H200
# node ran the 3B 12-25% under the one-GPU H200s for the same configurations (its dyn12k/96k 6,191.5 against lease
# 37's 7,312.1, selective recompute 5,183.6 against lease 36's 6,946.0) and the 7B's first pick 8% under lease 13's
# (2,615.9 against 2,838.6): its four are host misses too. Lease 43's two-lane H200 node ran lease 42's 3B
# configurations slower still (dyn4k/8k with the optimizer offloaded: step 3 in 39.5 s against 33.9 and 36.5 s on
# the four-lane nodes of leases 33 and 32) and the 7B's first pick 11% under lease 13's (2,528.1): its five are host
# misses. Lease 44's two-lane H200 node ran the 7B's micro-batches of 4/16 as lease 43's did, 6% under lease 13's
# (2,762.8 against 2,938.2; step 3 in 55.2 s against 51.7 s), its 3B's updates 2.0-3.8 s over the model beside one
# another (steps 2-4): its six are host misses too. Lease 45's two-lane H200 node ran the 1.5B's dyn8k/16k and
# dyn32k/96k 31% and 21% slower at step 3 than lease 38's one-GPU H200 (23.1 and 20.2 s against 17.6 and 16.7 s): its
# eight are host misses too. Lease 46's two-lane H200 node ran the 0.5B's dyn32k/96k at step 3 in 17.3 s (13.4-15.7 s on
# lease 39's one-GPU H200) and its 1.5B's updates 1-2 s over or under the model beside one another: its eleven are host
# misses too. Lease 47's two-lane H200 node ran the same 0.5B dyn32k/96k at util 0.4 in 17.0-19.0 s at steps 2
# and 4 (lease 39's 13.4-15.7 s at step 3), its 7B beside it: its eight are host misses too. Lease 50's one-GPU H200
# was a fast host: it ran the 7B's first pick (dyn24k/96k) in 46.7 s at step 3, its update in 30.7 s, where lease 47's
# node ran the same in 50.9 s (34.6 s) and the one-GPU H200s of leases 13 and 32 its dyn32k/96k, which the model puts
# 0.1 s apart, in 52.6-53.9 s (35.2-35.9 s): 13 % faster than they, beyond a step's noise; its three are host misses
# (they order among themselves as the model does, 1.00; the other 7B one-GPU trials 0.90 without them).
HOST_MISSES = set().union(*(_trials(lease, study, numbers) for lease, study, numbers in (
    ("h100_2026-11-26_l10", "c-3b", (0, 3, 4)),
    ("h200_2026-11-27_l32", "c-0.5b-t", range(5)), ("h200_2026-11-27_l32", "c-1.5b-h7", range(4)),
    ("h200_2026-11-27_l32", "c-3b-mb", range(3)),
    ("h200_2026-11-27_l33", "c-0.5b-t2", range(5)), ("h200_2026-11-27_l33", "c-1.5b-h8", range(4)),
    ("h200_2026-11-27_l33", "c-3b-mb2", range(3)), ("h200_2026-11-27_l33", "c-3b-h6", range(3)),
    ("h100_2026-11-27_l35", "c-1.5b-h11", range(5)),
    ("h200_2026-11-27_l40", "c-1.5b-h17", (0,)), ("h200_2026-11-27_l40", "c-0.5b-h18", (0, 1)),
    ("h200_2026-11-27_l41", "c-0.5b-h19", range(5)), ("h200_2026-11-27_l41", "c-1.5b-h20", range(4)),
    ("h200_2026-11-28_l42", "c-3b-h24", (0, 1, 3)), ("h200_2026-11-28_l42", "c-7b-h23", (0,)),
    ("h200_2026-11-28_l43", "c-3b-h27", range(3)), ("h200_2026-11-28_l43", "c-7b-h28", (0, 2)),
    ("h200_2026-11-28_l44", "c-3b-h30", range(4)), ("h200_2026-11-28_l44", "c-7b-h29", range(2)),
    ("h200_2026-11-28_l45", "c-1.5b-h33", range(4)), ("h200_2026-11-28_l45", "c-3b-h34", range(4)),
    ("h200_2026-11-28_l46", "c-0.5b-h35", range(6)), ("h200_2026-11-28_l46", "c-1.5b-h36", range(5)),
    ("h200_2026-11-28_l47", "c-7b-h39", range(2)), ("h200_2026-11-28_l47", "c-0.5b-h40", range(6)),
    ("h200_2026-11-28_l48", "c-7b-h43", range(2)), ("h200_2026-11-28_l48", "c-1.5b-h44", range(6)),
    ("h200_2026-11-29_l50", "c-7b-h45", range(3)))))


# Trials the model misorders on their node beyond a step's noise, known misses: on lease 32's node the 1.5B at
# dyn12k/96k util 0.4 (c-1.5b-h7 #1; lease 11's first launch, 18.4 s a step on an H100, the fastest there) ran its
# updates in 9.3, 14.7 and 11.7 s over steps 2-4 where selective recompute beside it (#2) ran 9.7-10.0 s and the
# offloaded one (#3) 9.0-11.0 s: its step 3 20-24% slower than theirs, which the model puts 4-5% faster. Lease 26's
# 1.5B at micro-batches of 2 (c-1.5b-h4 #2, SMALL_MISSES) measured its step 3 in 24.2 s, its steps 2 and 4 in 29.6 and
# 31.3 s: held out the model puts it 7-9% slower than the 4k budget beside it (#3) and full recompute's c-1.5b-s #0,
# which ran step 3 30% and 17% slower than it (over the steady steps it is 6% faster than #3, within a step's noise,
# and 4% slower than c-1.5b-s #0, as the model says).
# Lease 33's node repeated the first: the same 1.5B (c-1.5b-h8 #1) ran its updates in 7.6, 12.7 and 7.3 s over steps 2-4
# (step 3 the slow one again), and its 3B with selective recompute and half the optimizer on the CPU (c-3b-h6 #0,
# lease 10's #3 once more) in 20.8 and 31.3 s over steps 2-3, the model saying 16.0 s: lease 10's host ran that
# configuration slow too (its step 42.3 s), so the configuration's step 3, not lease 10's host alone.
# Lease 35 re-ran lease 26's 1.5B at micro-batches of 2 on an H100 (0.114 s a micro-batch, lease 26's 0.063 s): held out
# the 3B takes the other sizes' fixed micro-batch cost, 0.112 s (0.088 s before), where lease 33's node ran the 3B's
# micro-batches of 2 (c-3b-mb2 #1) at 0.071 s: priced 2.6 s over, it is put 2.7% slower than the 8k budget beside it
# (c-3b-h6 #2), which measured 18% slower.
# Lease 39's one-GPU H200 ran its 0.5B with vLLM's max_num_batched_tokens at 16k (c-0.5b-h16 #4) through a stall at
# step 3: its update 11.2 s against 5.2 and 5.8 s in steps 2 and 4, its gen 10.1 s against 6.1 and 8.1 s (24.2 s a step
# against 14.0 and 16.9 s); the same at util 0.5 (#15) ran step 3 in 14.5 s.
# Lease 46's 0.5B at dyn16k/32k (c-0.5b-h35 #0), its lane's first trial (compile caches cold) beside the other lane's
# first, ran its update in 12.2 and 13.4 s at steps 2 and 3 and in 5.6 s at step 4, where the same with the actor
# offloaded beside it (#1) ran 6.0-6.1 s: its step 3 (25.1 s) 61% slower than #1's, which the model puts 2% faster.
# Lease 47's 0.5B at dyn32k/96k util 0.4 (c-0.5b-h40 #0), its lane's cold first trial beside the 7B's, ran its update in
# 5.3, 10.7 and 5.6 s over steps 2-4: its step 3 (20.8 s) 35% slower than dyn16k/32k's beside it (#3, 15.4 s), which
# the model puts 0.3% slower.
# Three named here before are pairs split_by_the_poll tells apart, no longer outliers (lease 47):
# lease 32's 0.5B with selective recompute at dyn16k/32k (c-0.5b-t #4) ran its step 3 in 16.7 s, its steps 2 and 4 in
# 19.8 and 21.3 s: 15% faster at step 3 than dyn32k/96k beside it (#1, 19.2 s), 3% slower over the steady steps, as
# the model says since the checkpoint is priced (Efficiency.selective_checkpoint_s: 2.6% slower). On lease 33's node
# the same (c-0.5b-t2 #4) rolled out in 6.1 s at steps 2 and 3 where dyn32k/32k beside it (#0) waited 8.1 and 10.1 s
# (verl's 2 s polls), its update as #0's (6.9 against 6.6 s at step 3): its step 3 21% faster, by gen alone.
# Lease 45's 1.5B with selective recompute at dyn32k/96k (c-1.5b-h33 #2) rolled out in 6.1 s at step 3 where the same
# budgets without it beside it (#3) waited 8.1 s (verl's 2 s polls; both 6.1 s at step 2, 17.5 and 16.9 s a step), its
# update as #3's (7.7 against 7.8 s): its step 3 14% faster, by gen's poll, where the model puts it 1.4% slower.
KNOWN_OUTLIERS = {"h200_2026-11-27_l32/c-1.5b-h7.db/c-1.5b-h7#1", "h100_2026-11-27_l26/c-1.5b-h4.db/c-1.5b-h4#2",
                  "h200_2026-11-27_l33/c-1.5b-h8.db/c-1.5b-h8#1", "h200_2026-11-27_l33/c-3b-h6.db/c-3b-h6#0",
                  "h200_2026-11-27_l33/c-3b-mb2.db/c-3b-mb2#1", "h200_2026-11-27_l39/c-0.5b-h16.db/c-0.5b-h16#4",
                  "h200_2026-11-28_l46/c-0.5b-h35.db/c-0.5b-h35#0",
                  "h200_2026-11-28_l47/c-0.5b-h40.db/c-0.5b-h40#0"}


def host(c: cal.Case) -> str:
    """The node a known host miss ran on (its lease's folder), "" for the others."""
    return c.source.split("/")[0] if c.source in HOST_MISSES else ""


def split_by_the_poll(a: cal.Case, b: cal.Case) -> bool:
    """a measured slower than b by its rollout's rounding to verl's 2 s poll: their steps without gen are within one
    step's noise, and a's gen is longer by a poll interval or more (lease 47's 0.5B dyn64k/96k against selective
    recompute at dyn16k/32k: 18.2 against 15.8 s, gen 8.1 against 6.1 s, the rest 10.1 against 9.7 s)."""
    rest_a, rest_b = (step_order.without_gen(c.measured_step_s, c.measured_phases) for c in (a, b))
    return (a.measured_phases["gen"] - b.measured_phases["gen"] >= verl.SAMPLE_POLL_S - 0.1
            and rest_a is not None and rest_b is not None and rest_a / rest_b - 1 < STEP_NOISE)


@pytest.mark.parametrize("size", SIZES)
def test_held_out_each_size_meets_the_targets_but_known_misses_and_ties(held: list[cal.Case], size: str) -> None:
    """Spearman, within one GPU type's trials (a study's landscape), below the target only through pairs the model
    cannot tell apart or pairs across the H100 hosts the 3B's CPU optimizer ran on (HOST_MISSES): on the H100 the 3B
    (0.45 over eight trials since lease 30, 0.36 over seven before, 0.40 over lease 10's four) orders lease 10's #0 (no
    recompute) before #3 and #4 (selective recompute), which measured 7-8% faster, less than one step's noise; the 1.5B
    predicts lease 5's #0 and lease 11's first launch (budgets 16k and 12k) 0.4% apart, and lease 11's gen ran 2 s
    shorter on its machine (0.77 over nine trials since lease 26, 0.70 over the five before; every other misordered pair
    had lease 26's 4k budget in it, unpriced then: without lease 26's two small-micro-batch trials 0.86 over seven).
    Since the passes without fused kernels pay their logits, lease 18's trial without them at micro-batches of 4
    (c-1.5b-s #1), whose log-prob pass ran 0.2 s over the fused ones' where the others' ran ~1 s, is predicted 30% slow
    (20% before) and misordered with lease 5's #0, 10.7% slower measured, within a step's noise. With the small
    micro-batches priced the 1.5B's H100 trials are at 0.78 (0.65 before): its misordered pairs beyond those are with
    lease 26's micro-batches of 2, whose step 3 ran 18-23% faster than its steps 2 and 4 (KNOWN_OUTLIERS): without it
    0.93 over eight.
    The 0.5B on the H100 is ordered (0.90 over nineteen trials since the small micro-batches are priced, 0.82 before,
    0.90 before its trials without fused kernels were priced, 0.96 over the thirteen before leases 28 and 29). On the
    H200s the 1.5B is ordered
    (0.93 over thirteen trials, 0.91 before the logits were priced, 0.93 before leases 28 and 29 moved the others'
    refit), the 3B at 0.89 over seven (0.79 before the logits were priced, 0.82 before leases 28 and 29: the refit
    without it took logprob_pass_s from 2.53 to 2.65 s, which full recompute pays twice; 2.27 s since), its misordered
    pairs within a step's noise or predicted within 1%, and the 7B is ordered (1.00 over three).
    Lease 32's node (HOST_MISSES: its 0.5B-3B updates 10-30% slower than other nodes' for the same configurations)
    takes the H200's 1.5B to 0.71 over seventeen (0.93 over the thirteen off it), the 3B to 0.48 over ten (0.89 over
    the seven off it, its two small-micro-batch trials among its three; 0.82 over the ten since those are priced), and
    its own 0.5B, the H200's first, is at 0.60
    over five, each misordered pair within a step's noise; the 7B is at 0.90 over five (its two on that node as lease
    13's). Among themselves its four 1.5B are at -0.40: c-1.5b-h7 #1, a known outlier (KNOWN_OUTLIERS).
    Lease 39's one-GPU H200 ran the 0.5B as a user's study runs it (five trials): the model puts its dyn32k/96k at util
    0.4 and 0.5 and with max_num_batched_tokens 16k within 0.05% of each other (the KV cache holds every sequence at
    either util), a tie it cannot order, and they measured 13.4-15.7 s at step 3 (steps 3-4 6-11% apart, gen one or
    two 2 s polls); its CPU-optimizer trial is predicted and measured the slowest of them. Over those four the rank
    correlation is 0.40 and no pair the model tells apart is misordered."""
    cases = [c for c in held if c.size == size]
    fit = cal.errors(cases)
    assert fit.trials >= 1 and fit.step is not None and fit.step <= cal.STEP_TARGET
    for phase, err in fit.phases.items():
        assert err <= KNOWN.get((size, phase), cal.PHASE_TARGET), (phase, err)
    for gpu, (_, rho) in cal.errors(cases).rho_per_gpu.items():
        if rho is None or rho >= cal.SPEARMAN_TARGET:
            continue
        ok = [c for c in cal.ok_cases(cases) if c.gpu == gpu]
        wrong = [(a, b) for a in ok for b in ok
                 if a.predicted_step_s < b.predicted_step_s and a.measured_step_s > b.measured_step_s]
        assert wrong
        rest = [c for c in ok if c.source not in HOST_MISSES | KNOWN_OUTLIERS]
        for a, b in wrong:
            if len(rest) >= 3 and a in rest and b in rest:
                continue  # the rest's ordering is judged whole, below
            across_hosts = host(a) != host(b)
            assert (a.measured_step_s / b.measured_step_s - 1 < STEP_NOISE
                    or b.predicted_step_s / a.predicted_step_s - 1 < MODEL_TIE or across_hosts
                    or split_by_the_poll(a, b) or a.source in KNOWN_OUTLIERS or b.source in KNOWN_OUTLIERS), (
                        a.source, b.source)
        if 3 <= len(rest) < len(ok):  # without them the rest is ordered, but for pairs the model calls a tie
            rho = cal.spearman([c.predicted_step_s for c in rest], [c.measured_step_s for c in rest])
            misordered = [(a, b) for a, b in wrong if a in rest and b in rest]
            assert (rho is not None and rho >= cal.SPEARMAN_TARGET) or all(
                b.predicted_step_s / a.predicted_step_s - 1 < MODEL_TIE for a, b in misordered), (size, gpu, rho)


def test_the_weight_sync_on_one_gpu_is_no_longer_over_predicted(held: list[cal.Case]) -> None:
    """verl 0.9.1 hands an unsharded actor's weights to vLLM in 0.37-1.05 s; the model said 1.2-2.5 s (3-4x). Held
    out, the median trial is within the phase target and none is over-predicted by more than 2/3 (the 1.5B's fastest
    syncs: 0.40 s in lease 18 and 0.37-0.44 s on lease 20's node, against 0.52-0.60 s for its others; the model says
    0.61 s); three 0.5B steps of 0.66-0.67 s (lease 3's two, lease 24's #1) are a third under (36%, 35% before lease
    26, 34% before lease 25: the fit without the 0.5B went to 0.40 s with lease 25's 3B syncs of 0.46-0.54 s and
    lease 26's 1.5B syncs of 0.37-0.53 s; lease 27's 0.5B sync of 0.54 s is 20% under; lease 28's and 29's six
    0.5B syncs of 0.32-0.52 s are 17% under to 32% over). Off the known host misses (lease 10's, 32's and 33's nodes);
    on lease 32's node a 0.5B sync took 0.94 s at step 3 (0.6-0.9 s over its steps), 52% under. Lease 36's 3B on a
    one-GPU H200 synced in 0.39-0.63 s at step 3: its 0.39 s (c-3b-h12 #2, the 3B's fastest) is 71% over (74% since
    lease 41's node, whose syncs of 0.5-0.9 s take the refit without the 3B from 0.45 to 0.47 s; 75% since lease
    45's node's 1.5B syncs of 0.6-0.9 s; 76% since lease 47's 0.5B syncs of 0.35-0.73 s). Leases 38's and 39's 1.5B
    and 0.5B on one-GPU H200s synced in 0.38-0.68 s, 23% under to 19% over; lease 49's 1.5B on another in 0.48-0.60 s,
    up to 26% over."""
    errs = [c.predicted_phases["update_weights"] / c.measured_phases["update_weights"] - 1 for c in cal.ok_cases(held)
            if c.source not in HOST_MISSES]
    assert len(errs) == 86 and max(errs) < 0.77 and min(errs) > -0.37
    slow = [c.predicted_phases["update_weights"] / c.measured_phases["update_weights"] - 1 for c in cal.ok_cases(held)
            if c.source in HOST_MISSES]
    assert len(slow) == 100 and min(slow) > -0.55  # lease 32's 0.5B #1: 0.94 s (0.6-0.9 s over its steps) vs 0.45
    assert statistics.median(abs(e) for e in errs) <= cal.PHASE_TARGET


def test_the_report_has_the_summary_with_a_verdict_per_size(zeroed: list[cal.Case]) -> None:
    text = cal.report(cal.cases(list(DATA.glob("*/*.db"))), zeroed)
    assert "## Summary: per model size, leave one size out" in text
    summary, steady = text.split("## Summary")[1].split("\n## ")[0].split("measured by its steady steps")
    for table in (summary, steady):
        assert all(f"| {s} |" in table for s in SIZES) and "| **all** |" in table
        assert table.count("| met |") + table.count("| **not met** |") == len(SIZES) + 1


def test_the_steady_view_takes_a_trials_steps_from_2_on() -> None:
    """The 3B's first trial measured gen 18.1 s at step 3 and 8.1-12 s at its other steps: its steady gen is their
    median, and the case keeps step 3 as the study measured it."""
    three = next(c for c in cal.cases(list(DATA.glob("*/*.db"))) if c.source.endswith("c-3b#0"))
    assert three.measured_phases["gen"] == pytest.approx(18.1, abs=0.05)
    assert three.steady_phases["gen"] < 0.75 * three.measured_phases["gen"]
    assert cal.steady(three).measured_phases == three.steady_phases
    assert cal.steady(three).measured_step_s == three.steady_step_s != three.measured_step_s


def test_the_repeat_of_a_measured_step_is_the_median_of_its_other_steps() -> None:
    """Lease 39's first 0.5B trial ran steps 1-4 (step 3 measured, 15.7 s): its repeat is the median of steps 2 and 4
    (21.3 and 17.0 s), step 1's start-up work left out; a trial of steps 1-3 only repeats on step 2 alone."""
    cases = cal.cases(list(DATA.glob("*/*.db")))
    first = next(c for c in cases if c.source.endswith("c-0.5b-h16#0"))
    assert first.measured_step_s == pytest.approx(15.7, abs=0.05)
    assert first.retest_step_s == pytest.approx((21.3 + 17.0) / 2, abs=0.1)
    short = next(c for c in cases if c.source.endswith("c-0.5b-h16#15"))  # steps 1-3: 30.0, 14.4, 14.5
    assert short.retest_step_s == pytest.approx(14.4, abs=0.05)


def _case(source: str, predicted: float, measured: float, retest: float, gen: float = 8.1) -> cal.Case:
    return cal.Case(source=source, model="m", label="", status="ok", measured_step_s=measured,
                    measured_phases={"gen": gen}, predicted_step_s=predicted, predicted_phases={"gen": 7.0},
                    measured_peak_gib=None, predicted_peak_gib=None, predicted_fits=True, binding="", size="s",
                    gpu="h100", retest_step_s=retest)


def test_the_ordering_table_sets_the_models_spearman_beside_the_measurements_own() -> None:
    """Two studies of three on two hosts: the model orders each study right (1.00 within one study), the second host
    runs everything 1.5x slower, so over both the model's Spearman falls, while each trial's repeat orders the six as
    step 3 does but for one swap."""
    a = [_case(f"l1/a.db/a#{i}", p, p, p) for i, p in enumerate((10.0, 20.0, 30.0))]
    b = [_case(f"l2/b.db/b#{i}", p, 1.5 * p, 1.5 * p) for i, p in enumerate((12.0, 18.0, 25.0))]
    b[2] = dataclasses.replace(b[2], retest_step_s=29.0)  # step 3 37.5 s, its repeat 29 s: below a#2's 30 s
    row = next(line for line in step_order.ordering(a + b) if line.startswith("| s | h100 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    model = cal.spearman([c.predicted_step_s for c in a + b], [c.measured_step_s for c in a + b])
    assert model is not None and model < 0.95
    assert cells == ["s", "h100", "6", f"{model:.2f}", "0.94 (6)", f"{model:.2f} (6)", "2 (6)", "1.00"]


def test_the_ordering_table_takes_gens_poll_out_of_the_step_beside_it() -> None:
    """Three configurations the model orders by what is not gen (its gen the same for all, as a size's rollout is):
    each measured step 3 is that plus a gen verl's 2 s poll rounded to 6.1 or 10.1 s, which turns the order of the
    whole steps around (the model's Spearman -0.5) and not the order of the steps without gen (1.00)."""
    cases = [_case("l1/a.db/a#0", 17.0, 10.0 + 10.1, 17.0, gen=10.1),
             _case("l1/a.db/a#1", 18.0, 11.0 + 6.1, 18.0, gen=6.1),
             _case("l1/a.db/a#2", 19.0, 12.0 + 6.1, 19.0, gen=6.1)]
    row = next(line for line in step_order.ordering(cases) if line.startswith("| s | h100 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "-0.50" and cells[5] == "1.00 (3)"
    assert step_order.without_gen(cases[0].measured_step_s, cases[0].measured_phases) == pytest.approx(10.0)
    assert step_order.without_gen(cases[0].measured_step_s, {}) is None
