"""The time model's constants: what the lengths look like where nothing tells them (Workload) and how efficiently
each phase runs (Efficiency, each constant with where it was fitted), verl 0.9.1's and the verl 0.4-era tables'."""

from __future__ import annotations

from dataclasses import dataclass, replace

from autotune.estimate.offload import DEFAULT_HOST_COPY


@dataclass(frozen=True)
class Workload:
    """What the lengths look like at the measured step, as a share of the job's maxima, where nothing tells them.

    From verl_megatron_practice's DAPO runs: update MFU and step times imply about 1.6k tokens per 10k-token
    sample at step 3 (short math prompts, responses far below the cap).
    """

    prompt_fraction: float = 0.12
    response_fraction: float = 0.18


@dataclass(frozen=True)
class Efficiency:
    """Free constants of the time model."""

    # The share form (the verl 0.4-era tables' passes, VERL_04_EFFICIENCY; verl 0.9.1's use the layer form below):
    # time = FLOPs / (peak * compute share) + FLOPs / (HBM bandwidth * intensity). Fitted on the
    # measured MFU of verl_megatron_practice: ~0.4 on H100 (989 TFLOPS, 3.35 TB/s), ~0.78 on H20 (148, 4.0).
    # train and forward were 0.9 and 0.6 before the engine's fixed pass costs (logprob_pass_s, update_pass_s) took
    # the part of each pass that is not FLOPs: refitted with them in, on the same tables (step_time_error.md).
    train: float = 0.95  # share of bf16 peak that the update's GEMMs reach, compute-bound part
    forward: float = 0.7  # the same for verl's log-prob passes
    intensity: float = 213.0  # FLOPs per byte of HBM traffic of the whole update (norms, copies, optimizer)
    # verl 0.9.1's passes: not the share form above (HBM traffic in proportion to the FLOPs, which grow with a layer's
    # widths squared) but the layer form: a layer's GEMM and attention FLOPs at forward_gemm / train_gemm of the bf16
    # peak plus its elementwise traffic (norms, RoPE, the SwiGLU's product, residuals), which grows with its widths:
    # bytes a token per hidden unit and per FFN unit a token passes through, forward / forward and backward, at the
    # GPU's HBM bandwidth. Timed on the lent H200 for the 0.5B-32B at 8k-74k tokens of 1k-token sequences
    # (benchmarks/forward_pass.py fit_layer_form, benchmarks/results/forward_pass_h200.json; eager PyTorch, one kernel
    # an operation, so Megatron's fused norms move at most this): every row within 7 % forward, 11 % forward and
    # backward. The whole layer runs at 327 TFLOP/s forward on the 0.5B and 533 on the 7B, where the share form
    # charges every size ~413 (H200): it charged the 7B's log-prob pass 1.2 s and its update 1.3 s of GPU work too
    # much, which looked like a smaller fixed cost (real_verl_gpu.md). Attention at the GEMMs' rate: PyTorch's flash
    # attention, timed alone at 1k-16k-token sequences (forward_pass_h200_attention.json), runs at 0.21-0.47 of the
    # peak forward and backward, but priced so it put the Megatron-core probes' 4k budget ahead of their 8k one (the
    # 1.5B on one H200, measured 8 % the other way: Transformer Engine's cuDNN attention is not PyTorch's), and the
    # layers at 4k- and 8k-token sequences are within 16 % (21 % forward and backward) without it
    # (forward_pass_h200_long.json).
    # (0, 0): the share form (the verl 0.4-era tables', VERL_04_EFFICIENCY, on which it was fitted).
    # Fitted with attention as the model counts it (attention_flops, half of the GPU's; 2026-12-02: fitted with the
    # GPU's count, 153.2 / 298.1 a hidden unit, the model had priced half the attention it was fitted with).
    layer_bytes_forward: tuple[float, float] = (160.2, 20.9)
    layer_bytes_train: tuple[float, float] = (319.5, 72.1)
    forward_gemm: float = 0.713
    train_gemm: float = 0.697
    tokens_half: float = 1024.0  # micro-batch size (tokens) at which GEMM efficiency halves
    # ... for a layer of this many GEMM weights on a GPU; a layer of W weights halves at tokens_half * this / W (0: at
    # tokens_half for every layer, the verl 0.4-era form). A GEMM's fixed latency weighs against its FLOPs, and a
    # larger layer's GEMMs amortise it at fewer tokens: the lent H200 ran each catalog size's layer GEMMs (forward and
    # backward) at 512-24k tokens (benchmarks/results/gemm_shapes_h200_fine.json, benchmarks/gemm_shapes.py
    # tokens_half): halved at 1,977, 485, 314 and 85 tokens for the 0.5B, 1.5B, 3B and 7B, whose layers hold 14.9M,
    # 46.8M, 77.1M and 233M GEMM weights, a product within 20 % of one constant (2.0e10-3.0e10 token-weights): its
    # geometric mean at tokens_half. With every layer at 1,024 tokens the 7B's micro-batches of 2 sequences (2.4k
    # tokens) ran their updates at 0.59 of the 24k ones' rate in the model (measured GEMMs: 0.97), and left nothing
    # per micro-batch above it (-0.03 and -0.01 s, leases 48 and 53) where the 0.5B-3B's left 0.06-0.20 s; at the
    # measured rate it leaves 0.07-0.09 s, as they do. Checked where it was not fitted: each GPU's shard of the 7B's,
    # 14B's, 32B's and 72B's layers at TP 1-8 (gemm_shapes_h200_tp.json): every shard whose rate halves at 100 tokens
    # or more halves within a factor of 2 of what this prices (the 7B at TP 8: 1,474 tokens measured, 816 priced);
    # fitted on those sixteen shards alone the constant is 20.8M.
    tokens_half_layer_params: float = 23.2e6
    # Per extra TP rank, at hidden size 4096: smaller GEMMs and exposed all-gather/reduce-scatter. Communication
    # per token grows with h and compute with h^2, so the penalty scales as 4096/h. (Fitted before a GEMM's latency
    # was priced by the weights a GPU holds, which prices part of the smaller GEMMs too; not refitted.)
    tp_penalty: float = 0.04
    cp_penalty: float = 0.03  # per extra CP rank: KV exchange
    hbm: float = 0.8  # share of HBM bandwidth decode reaches
    decode_compute: float = 0.5
    prefill: float = 0.5
    decode_step_overhead_s: float = 0.007  # scheduler, sampler and kernel launches per decode step, vLLM eager
    # The same with CUDA graphs (verl >= 0.9 captures them by default: autotune.verl.ENFORCE_EAGER_DEFAULT): the
    # forward is one graph replay, what is left is vLLM's scheduler, sampler and output processing on the node's CPU,
    # which vLLM 0.24 runs for the next step while the GPU replays this one (async scheduling: on by default where
    # the executor supports it, as the `mp` executor of verl 0.9.1's vLLM server does): a step takes the longer of
    # the two. Fitted on the real verl 0.9.1 GRPO steps (128 sequences decoded together, 1,024
    # decode steps; benchmarks/cost_fits.py fit_decode_overhead: per GPU type, the median decode step of the trials
    # whose step outlasted their GPU's work, verl's 2 s poll priced): 6.8 ms over the hundred on the lent H100 nodes
    # (6.9 ms before leases 68-69's fast hosts), 6.7 ms over the 155 on the lent H200 nodes, every one of them
    # host-bound (Qwen2.5-0.5B to 7B). Their gen is
    # the rollout rounded up to the poll (6.1, 8.1, 10.1 s ...; one interval is 2 ms a decode step): the H100's
    # 0.5B, 1.5B and 3B all measure 8.1 s, which the GPU's work added to the host's (lease 34's form before) put at
    # 8.1, 9.5 and 11.1 s. The H200 nodes' CPUs as much as their GPUs: a GPU type without its own figure takes the
    # H100's.
    decode_step_overhead_graph_s: float = 0.0068
    # The H200's: one-GPU nodes ran the rollout within 6.1 s, the four-lane nodes of leases 32-33 within 8.1 s.
    decode_step_overhead_graph_by_gpu: tuple[tuple[str, float], ...] = (("h200", 0.0067),)
    # The host's scheduling overlaps the GPU's replay (vLLM's async scheduling); verl 0.4's vLLM ran them in turn.
    decode_overlap: bool = True
    longest_response: float = 0.9  # the longest of a step's responses, as a share of max_response_length
    rope_fusion: float = 0.817  # update and log-prob time with apply_rope_fusion over without (fitted, paired rows)
    # MoE, fitted on dapo_moe30b (benchmarks/step_time_fit.py; leave-one-table-out in step_time_error.md):
    moe_train: float = 0.65  # update and log-prob efficiency relative to dense (grouped GEMMs, router, permutation)
    a2a: float = 1.0  # share of link bandwidth the all-to-all reaches
    moe_decode: float = 0.6  # vLLM's fused MoE decode kernel (a few tokens per expert) relative to dense GEMMs
    # Per MoE layer and decode step, whatever the TP: the routing, alignment and expert kernels launched one by one
    # (the tables ran vLLM eagerly, verl 0.4's default).
    moe_decode_layer_s: float = 3e-4
    rollout_tp_comm_s_per_layer: float = 3.5e-5  # two all-reduces per layer per decode step
    # Host <-> device copies and the CPU optimizer (sources in autotune/estimate/offload.py HostCopy).
    host_link_share: float = DEFAULT_HOST_COPY.link_share
    gpus_per_uplink: int = DEFAULT_HOST_COPY.gpus_per_uplink
    cpu_adam_params_per_s: float = DEFAULT_HOST_COPY.cpu_adam_params_per_s
    # Weight sync of an actor sharded over TP/PP/EP ranks: each tensor gathered, then loaded into vLLM. Fitted on the
    # verl 0.4-era tables (2.2-8.5 s): a fixed 1.0 s (hundreds of per-tensor collectives) plus the bytes at this rate.
    reshard_gbps: float = 6.0
    # An actor whole on each GPU (nothing to gather) hands its weights to the colocated vLLM by CUDA IPC: verl 0.9.1's
    # update_weights took 0.43-0.77 s on one H100 for 1-6 GB of bf16 weights (Qwen2.5-0.5B to 3B; calibration.md):
    # a fixed cost (vLLM's wake-up of the weights, the bucketed per-tensor hand-over, empty_cache), the median
    # residual (benchmarks/cost_fits.py fit_pass_costs: 0.42 s over the forty-seven steps of leases 3 to 25, 0.43 s
    # over the forty-four before lease 25, 0.44 s over the forty before lease 24, 0.45 s before lease 22; held out per
    # size 0.40-0.45 s: within the 0.1 s the constants keep to their fit), plus the bytes at a rate
    # read off the rise from 0.5B to 3B (in sample: 3B's 6 GB took ~0.2 s more than 0.5B's 1 GB).
    reshard_local_s: float = 0.46
    reshard_local_gbps: float = 30.0
    # verl 0.9.1's Megatron engine costs a pass over the step's batch this much beyond its FLOPs, whatever the model
    # size: on the eleven real GRPO steps (Qwen2.5-0.5B to 3B, one H100) old_log_prob ran 1.9-4.8 s above the FLOP
    # time, size-independent. What it pays: packing the batch into nested micro-batches (dynamic-batch partitioning),
    # Megatron's schedule set-up, the log-prob and entropy post-processing over the 152k vocabulary, the results'
    # gather to the driver. Every trial ran the same batch (128 x ~1.2k tokens), so how the cost grows with the batch
    # is not measured here; the 2-layer run of 32 short sequences (real_verl_throughput.md, 4 s a step) shows part
    # of it does. Per pass is the form that leaves large jobs where the verl 0.4-era tables put them (a cost per
    # token or per sequence at this size would add minutes to their steps). The median residual
    # (benchmarks/cost_fits.py fit_pass_costs) over the forty-seven measured steps of leases 3 to 25 (twenty-three
    # on H200s: the 7B's three, twenty of the 1.5B and 3B): 2.40 s, 2.41 s on the forty-four before lease 25 (its
    # three 3B trials on an H100 left 1.9-2.1 s, and 5.3 s where its log-prob pass ran micro-batches of 4
    # sequences without dynamic batching), 2.40 s on the forty before lease 24 and the
    # thirty-four before lease 22 (2.53 s on the twenty-eight before lease 20, 2.73 s on the eighteen before lease
    # 19, 3.0 s on the thirteen before lease 11). Since the passes without fused kernels pay their logits apart
    # (unfused_logit_ps), whose 1 s a pass this median took in, it is 2.27 s over the fifty-eight steps of leases 3 to
    # 29 (2.42 s with it unpriced; held out without the 7B 2.35 s, 2.63 s before). With each pass's GPU work priced by
    # the layer form (layer_bytes_forward, 2026-12-01), every size leaves one figure above it, the 7B too (2.1-2.8 s,
    # the 7B's 2.4 s where the share form left it 1.0 s): 2.50 s over the 197 measured trials; 2.13 s over 199 with
    # each micro-batch priced apart (logprob_micro_batch_s, below: the trials' two to five micro-batches a pass were in
    # it) and the layer form refitted with attention as the model counts it (layer_bytes_forward, 2026-12-02); 2.08 s
    # once the passes without fused kernels no longer pay their logits apart (unfused_logit_ps 0, lease 65).
    logprob_pass_s: float = 2.08
    # ... and each of its micro-batches (the forward's kernels launched again, its logits' log-softmax and entropy, the
    # engine's packing and unpacking of one micro-batch): the passes of many small micro-batches left more above the
    # model than the dynamic budgets' two to five did, at every size (2026-12-02, lease 55's 7B at log-prob
    # micro-batches of 4: 3.2 s above the same host's pick): fixed micro-batches of 4 sequences (32 a step) 2.2 s,
    # of 8 (16) 0.5 s, an 8k budget (19) 1.8 s, against -0.2 s at two. Fitted with logprob_pass_s
    # (benchmarks/cost_fits.py fit_logprob_micro_batch_cost: least squares of what a pass leaves on its count);
    # 0.076 s since lease 65 (unfused_logit_ps 0: the passes of micro-batches of 4/8 without fused kernels left more);
    # 0.069 s with lease 68's nine 0.5B trials of one host in the fit.
    logprob_micro_batch_s: float = 0.069
    # The same for the update (forward and backward of each micro-batch, two optimizer steps, loss and metric
    # reductions): 3.3-6.9 s above the FLOP time over the twenty trials without the CPU optimizer, full recompute
    # (whose second forward is priced on its own: estimate_throughput), micro-batches of one sequence (priced on
    # their own: micro_batch_of_one_s; lease 25's three 3B trials are each one of these) or micro-batches under 4.5k
    # tokens of more than one sequence (priced on their own too: small_micro_batch_s, small_budget_micro_batch_s; with
    # their seven in unpriced the fit would be 4.81 s over thirty-nine, 4.45 s over the thirty-two). Their median
    # residual is 4.36 s, as over the twenty-one before lease 26 and the nineteen before lease 24 (lease
    # 22's micro-batch of one among them; 4.73 s over all twenty-three, lease 22's and 24's micro-batches of one in at
    # 23.0 and 24.9 s; 4.54 s over the twenty-eight steps before lease 20 with the full-recompute ones in, 4.73 s on
    # the eighteen before lease 19, 4.9 s on the twelve before lease 11). Leases 28's four 0.5B trials (4.40-5.96 s,
    # two with their parameters and optimizer offloaded) take the median over twenty-five to 4.45 s: within the
    # constant's 0.1 s, kept. With the updates without fused kernels paying their logits apart (unfused_logit_ps), the
    # median is 4.30 s. Lease 32's twelve 0.5B-3B trials on an H200 node whose small models' updates ran 10-30% over
    # the same configurations on other nodes (the 7B's alike) take it to 4.45 s: fitted on every host, as users' vary.
    # Lease 33's fifteen, lease 32's plan on a second four-lane H200 node (its small models' steps as noisy: the 1.5B
    # at dyn12k/96k ran updates of 7.6, 12.7 and 7.3 s over steps 2-4), take it to 4.73 s (4.30 s without the two
    # nodes' 0.5B-3B trials): four lanes share a host, and the time the small models wait on it is in the fit.
    # Lease 35's five 1.5B trials on an H100 host whose updates ran ~2 s over lease 11's host for the same
    # configuration (10.2 against 8.1 s) take it to 4.85 s; lease 36's five 3B trials on a one-GPU H200 host (its
    # updates 3-10% under the model, the CPU-Adam one 14% over) to 4.78 s, and lease 37's three 3B trials on another
    # (updates 13% under to 4% over) to 4.73 s. Lease 43's two-lane H200 node (its 3B 10-25% under the one-GPU H200s,
    # the 7B's first pick 11% under lease 13's host) to 4.83 s.
    # With the GEMMs' latency priced by layer size (tokens_half_layer_params, lease 53) the larger sizes' updates
    # are priced nearer their GEMMs' full rate, and the fit over every trial rose to 5.00 s; with the layer form
    # (layer_bytes_train, 2026-12-01) 4.91 s, the 7B's updates (all with the CPU optimizer) leaving what the others'
    # do (4.0-6.3 s a size, the 7B's 6.0 s, where the share form left it 4.0 s); 4.89 s with the layer form refitted
    # with attention as the model counts it (layer_bytes_train, 2026-12-02). Lease 62's three 0.5B trials on a fast
    # H100 host (updates 4.0-4.4 s where the same configurations ran 5.1-5.7 s on leases 4-28's) to 4.79 s. Lease 65's
    # one-host pairs took unfused_logit_ps to 0: the updates without fused kernels no longer pay ~1.1 s apart, 5.02 s.
    # Lease 67's five 0.5B trials on a slow H100 host (updates 6.9-8.5 s, the same configuration 4.9 s on lease 66's),
    # the updates without fused kernels paying no logits (unfused_logits_by_phase): 5.04 s.
    update_pass_s: float = 5.04
    # Without dynamic batching at ppo_micro_batch_size_per_gpu=1 every update micro-batch is one sequence, and each
    # costs this much beyond its FLOPs and update_pass_s, whatever the model size: lease 22's 1.5B on an H200
    # (c-1.5b-h2 #2) and lease 24's 0.5B on an H100 (c-0.5b-bc #4), both micro-batches of 1 (log-prob 4) over
    # 128 sequences of ~1.2k tokens a step (128 micro-batches), ran their updates in 28.4 and 27.0 s where the model
    # said 9.8 and 6.5 s: 0.145 and 0.161 s a micro-batch (benchmarks/cost_fits.py fit_micro_batch_cost; the
    # median). Either size's figure predicts the other's update within 7% (calibration.md, held out). Lease 25 tested
    # it at a third size, the 3B on an H100 with its optimizer offloaded (c-3b-h3 #1): predicted with the constant
    # before it ran, its update took 37.6 s against 38.1 (38.5 held out, the two others' fit 0.153 s); alone it says
    # 0.146 s a micro-batch, and the median of the three is 0.146 s (within the constant's rounding). Lease 26's 1.5B
    # on an H100 (c-1.5b-h4 #0): 30.4 s against 30.1 predicted, 0.152 s a micro-batch; the four's median 0.149 s.
    # Not a cost of every micro-batch: the four trials with micro-batches of 4 sequences (0.5B to 7B, 32 a step) and
    # the dynamic-batch ones of 8k to 32k tokens (6 to 20 a step) are predicted within a few % without it (0.15 s each
    # would put the four 4.9 s, 15-57%, over). What a micro-batch of one sequence pays that one of four does not is
    # not measured; micro-batches under 4.5k tokens of more than one sequence pay their own (below). Lease 46's
    # two-lane H200 node ran the 0.5B's and the 1.5B's at 0.125 and 0.116 s (their updates 22.6 and 25.1 s, the model
    # 25.3 and 29.0 s at 0.146 s): the six's median 0.142 s.
    # 0.146 s from lease 37 (update_pass_s at 4.73 s) to lease 46; 0.142 s to lease 52; 0.151 s with the GEMMs'
    # latency priced by layer size (tokens_half_layer_params, lease 53); 0.154 s with the layer form.
    micro_batch_of_one_s: float = 0.154
    # Update micro-batches under SMALL_MICRO_BATCH_TOKENS that are not single sequences cost this much each beyond
    # their FLOPs and update_pass_s, fixed micro-batches of a few sequences (small_micro_batch_s) and those of a
    # dynamic token budget (small_budget_micro_batch_s) apart, as they measured apart: the median per micro-batch of
    # what each such update leaves above update_pass_s (benchmarks/cost_fits.py fit_small_micro_batch_costs, kept out
    # of update_pass_s's fit as micro-batches of one are). Micro-batches of 2 sequences (~2.4k tokens, 64 a step):
    # 0.112 s on the 0.5B (lease 29, H100), 0.063 s on the 1.5B (lease 26, H100), 0.101 and 0.071 s on the 3B (leases
    # 32 and 33, two four-lane H200 nodes): 0.086 s (over update_pass_s at 4.73 s). A 4k budget (38 a step): 0.142,
    # 0.152, 0.178 and 0.111 s on the same four, 0.002 s on lease 3b's 0.5B, whose unfused attention's long GPU work per
    # micro-batch hid it: 0.142 s. Held out (leave one size out), each size with the other sizes' figures, every such
    # trial's update is within 20% and its step within 19% but two (calibration.md): lease 3b's unfused 0.5B, update
    # 33% over (its step 11%), and lease 26's 1.5B at micro-batches of 2, step 26% over (update 18%: its measured step
    # 3 ran gen in 6.1 s where its other steps took 8.1 s). Fitted first on the three sizes before lease 33 (0.105 and
    # 0.155 s), the rule put lease 33's two updates 8% and 10% over before it was refitted. A floor
    # instead (each micro-batch at least a host time H per layer, paying max(0, H - its GPU work), which would price
    # micro-batches of one alike and hide the unfused one) held out worse where it matters: the 3B's 4k budget 26% under
    # and the 1.5B's and 3B's orderings 0.58 and 0.66 (0.78 and 0.82 with the two constants), as it charged larger
    # micro-batches too (the 1.5B's of 4 sequences 1.7 s) where nothing was measured. Micro-batches of 4 sequences
    # (4.7k tokens) and budgets of 8k and more cost nothing measurable at four sizes. Outside the campaign, the verl
    # 0.4-era grpo_qwen2.5_7b #7/#8 (8 H100s, TP 4, micro-batches of 2: 2,048 a step at the Workload's lengths, 3.4k
    # tokens; its own lengths not known) ran its update in 300 s, which the model puts at 230 s without this cost and
    # 406 s with it: 0.034 s a micro-batch there, verl 0.4's engine (VERL_04_EFFICIENCY, below).
    # Lease 35's 1.5B at micro-batches of 2 on an H100 (lease 26's once more, 0.114 s), with update_pass_s at 4.85 s:
    # 0.099 and 0.139 s; with update_pass_s at 4.73 s (lease 37): 0.101 and 0.142 s. Lease 41's two-lane H200 node
    # (its small models' steps 20-40 % over the one-GPU H200s', as the four-lane nodes of leases 32-33 ran) measured
    # both kinds on the 0.5B and the 1.5B: micro-batches of 2 at 0.153 and 0.165 s, a 4k budget at 0.183 and 0.171 s;
    # fitted on every host, as update_pass_s is: 0.111 and 0.149 s. Lease 43's 3B at a 4k budget on another
    # two-lane node (0.189 s a micro-batch), with update_pass_s at 4.83 s: 0.112 and 0.160 s. Lease 47's 0.5B at
    # micro-batches of 2 on another two-lane H200 node (0.141 s): 0.114 s. Lease 48's 1.5B on another two-lane H200
    # node, both kinds (0.121 and 0.198 s; its 4k budget's steps 3 and 4 44 % apart): 0.117 and 0.170 s. Its 7B at
    # micro-batches of 2 (~2.4k tokens) with the CPU optimizer, not in the fit as no CPU-optimizer update is, left
    # nothing per micro-batch (-0.02 s): a 7B micro-batch's ~0.3 s of GPU work may hide what the host spends on it,
    # where the 0.5B-3B's 0.01-0.07 s do not; one trial, not yet a rule. Lease 53 ran it again beside the 7B's best
    # on one host (-0.01 s), and the GEMMs of each size timed at small micro-batches said why: at every layer's
    # tokens_half the model priced the 7B's micro-batches of 2 at 0.59 of its GEMMs' full rate, which they run at
    # 0.97 (tokens_half_layer_params). Priced by layer size, the 7B's two leave 0.07 and 0.09 s a micro-batch, within
    # the smaller sizes' spread, and the fit over every trial is 0.126 and 0.175 s (0.131 and 0.175 s with the layer
    # form; 0.130 and 0.175 s refitted with attention as the model counts it, 2026-12-02).
    # Lease 56 ran the 7B at a 4k budget (38 micro-batches of 4k tokens, ~0.39 s of GPU work each): it left nothing
    # (-0.02 s a micro-batch) where the constant charged 0.175 s, 6.6 s a step; and lease 3b's unfused 0.5B at a 4k
    # budget (0.33 s of GPU work each) had left nothing too. What a small micro-batch costs is the host's work on it
    # (Python, autograd, TE's per-layer launches) that its GPU work does not hide: so it is priced since as each
    # kind's host seconds a layer of the pipeline stage, less the micro-batch's GPU work, never below zero
    # (small_micro_batch_seconds), still only under SMALL_MICRO_BATCH_TOKENS (the floor above, paid by every
    # micro-batch, charged larger ones where nothing was measured). Fitted (cost_fits.py
    # fit_small_micro_batch_costs: per kind the median over the trials without the CPU optimizer of what a
    # micro-batch left plus its GPU work, per layer): 6.7 and 9.5 ms a layer, the 0.5B-3B's 0.11-0.29 s a
    # micro-batch, the 7B's 0 at both kinds. Over the 22 trials with small micro-batches the update's median |error|
    # from them is 1.0 s (1.5 s with the constants per micro-batch); the 7B's micro-batches of 2 left 0.07 and 0.09 s
    # (with the CPU optimizer, whose host rate varies), priced 0 now, 0.13 before. Refitted on lease 71's two (a slow
    # H100 host's micro-batches of 2 and 4k budget on the 1.5B, 0.114 and 0.129 s a micro-batch, under the kinds'
    # medians): 6.4 and 9.2 ms (6.6 and 9.3 before them).
    small_micro_batch_layer_s: float = 0.0064
    small_budget_micro_batch_layer_s: float = 0.0092
    # Selective recompute checkpoints each layer's core attention (and its MLP with recompute_modules=[core_attn,mlp])
    # in every update micro-batch, and that costs this much a layer and micro-batch beyond the recomputed FLOPs (3% of
    # the update's with core_attn, +20% with mlp): Megatron's checkpoint saves and restores the RNG states and runs
    # the layer's forward again through autograd. Fitted on the paired trials, one host each, the same configuration
    # with and without it (benchmarks/cost_fits.py fit_checkpoint_cost: the median over the pairs of what the pair's
    # update differs by beyond the model's difference, per checkpointed layer; steps 2 on). Lease 44 ran the 3B at an
    # 8k budget (36 layers, 20 micro-batches a step) with and without core_attn's, with and without the CPU optimizer,
    # on one H200 host: +1.8 and +1.1 s, where the FLOPs say +0.2 s; leases 10 and 34 (H100s) +1.1 and +5.3 s with the
    # CPU optimizer; the 1.5B's [core_attn,mlp] at 12k (28 layers, 14) on leases 19 and 35 +0.8 and +1.6 s, the FLOPs
    # +0.8 s. Six pairs: 0.0 to 7.1 ms a layer and micro-batch, 1.57 ms their median. Lease 45 tested that price where
    # it was not fitted, each pair on one H200 host: core_attn's at a 16k budget on the 3B (the model at 1.6 ms +0.7 s,
    # measured +0.5 s), at 8k and 32k on the 1.5B (+1.0 and +0.4 s; measured +0.9 and -0.2 s), and the 3B's
    # [core_attn,mlp] at 16k (+2.0 s, its FLOPs +1.4 s; measured +0.8 s). Ten pairs: -1.9 to 7.1 ms, 1.19 ms. Lease
    # 47's 0.5B [core_attn,mlp] at dyn16k/32k on a two-lane H200 node, 0.5 ms: eleven, 1.16 ms (kept at 1.2 ms).
    selective_checkpoint_s: float = 0.0012
    # Transformer Engine's unfused attention (the doctor's fallback where cuDNN's fused attention fails) runs the
    # attention's FLOPs at this rate: its [heads, s, s] scores padded to the longest sequence, fp32 softmax, no
    # fusion. Measured on the H100 (TFLOP/s): the 0.5B old_log_prob took 6.4 s unfused (lease 3b #0) and 2.7 s fused
    # (lease 4 #0) at the same budgets: 3.7 s for its 3.9e12 attention FLOPs as attention_flops counts them
    # (benchmarks/results/calibration.md).
    unfused_attn_tflops: float = 1.1
    # Without verl's fused kernels (use_fused_kernels=false; the attention backend is another knob, priced above) a
    # log-prob pass materialises the logits over the whole vocabulary and computes log-probs and entropy from them in
    # separate fp32 elementwise kernels, where the fused kernel takes them from the hidden states in chunks: this much
    # per logit a GPU holds (picoseconds; tokens x vocabulary / TP, of its DP and CP share, on the last PP stage), in
    # each log-prob pass and once in each update epoch (its forward and backward over the logits cost about what the
    # log-prob pass's do beyond the fused kernel's own backward). Fitted on the real verl 0.9.1 trials
    # (benchmarks/cost_fits.py fit_logit_cost): the median over the eleven without fused kernels (0.5B and 1.5B, one
    # H100) of what each old_log_prob left above the median of the trials with them of its size, GPU and attention
    # backend, per logit; at ~2.3e10 logits a step (150k tokens, 152k vocabulary) 1.0-1.1 s a pass on the 0.5B, 0.7 s
    # on the 1.5B. The updates of the 0.5B's seven such trials ran a median 1.1-1.2 s over those with fused kernels
    # beside them, the 1.5B's one as fast as its two. Every trial held about as many logits: per logit (not per pass)
    # is the form of the work, not a fit; nor is the H100's figure measured on other GPUs.
    # Lease 32's 1.5B without them at micro-batches of 4 on an H200 (the twelfth) takes the median to 49.5 ps, lease
    # 33's the same (the thirteenth, 74 ps) to 50.5 ps; lease 35's five fused 1.5B trials on an H100, the passes the
    # 1.5B's are compared with, to 48.7 ps. Lease 48's 1.5B at micro-batches of 4 without them on a two-lane H200 node
    # (32 ps against the five fused 1.5B trials beside it, which moved the H200 1.5B's baseline too): 42.0 ps over
    # sixteen. Lease 61's 1.5B at micro-batches of 4/8 without them on one H100 (56 ps against the five fused 1.5B
    # trials of leases 59-61 on H100s): 48.8 ps over seventeen. Lease 62's three fused 0.5B trials on a fast H100 host
    # (old_log_prob 1.8-2.2 s, where the same configurations ran 2.6-2.8 s on leases 4-28's), which lowered the fused
    # 0.5B H100 passes the unfused ones are compared with: 51.9 ps over the same seventeen. Lease 64's two 1.5B without
    # them on a fast H100 host (micro-batches of 4/8 31 ps, full recompute at dyn8k/16k -1 ps, against the H100 1.5B's
    # fused passes of every host): 48.8 ps over nineteen.
    # Those compare a pass with other hosts' passes, and hosts ran one configuration up to 41% apart. Lease 65 ran the
    # 1.5B with and without fused kernels on one H100 host (full recompute at dyn8k/16k, micro-batches of 4/8): the
    # passes without them took +0.07 s, -0.00 s and -0.90 s (3, 0 and -39 ps), their updates 0.3-2.0 s less. Fitted
    # on such one-host pairs (fit_logit_cost: the median, at least zero), a logit costs nothing measurable: verl
    # 0.9.1's fused kernels save memory (memory.py prices the logits they do not hold), not time. The cross-host
    # figures stay in calibration.md (`logit_costs`). Lease 66 ran the 0.5B at dyn16k/32k with and without them on one
    # H100 host: the pass without them took +1.0-1.1 s at steps 2-3 (49 ps), its update none. The median of the four
    # pairs: 1.4 ps. Per logit cannot be both sizes' form (the same vocabulary, tokens and logits a pass); what differs
    # is the pass's memory (the 0.5B's at 78 GiB of the H100's 80, the 1.5B's at 70) and its micro-batches (five of
    # 32k tokens against ten of 16k): one pair a size does not tell which.
    # Lease 67 ran the 0.5B on one (slow) H100 host at both: at dyn8k/16k (ten micro-batches of 16k, 54.5 GiB) the pass
    # without them took +0.32 s (14 ps; +0.46 s over steps 2-3), at dyn16k/32k (five of 32k, 78.0 GiB) +0.75 s (32
    # ps). At ten of 16k the 0.5B pays about what lease 65's 1.5B paid over its steps 2-3 (+0.38 and +0.65 s), at five
    # of 32k twice to three times that: the price grows with the micro-batch's logits (or the memory they fill), not
    # with the model size. The median of the six pairs: 8.45 ps, a pass's alone. In every pair the update without
    # them ran 0.2-2.0 s faster than its twin (the kernels' backward recomputes the logits): the update pays none.
    # The head alone on an H100 (benchmarks/unfused_logits.py, results/unfused_logits_h100/) prices a logit alike at
    # 16k and 32k tokens a micro-batch with the allocator's cache warm (21 ps with verl's entropy, 9 without), and
    # 1.2-2.9x that with the GPU otherwise full and the cache emptied before each micro-batch: the memory the logits
    # fill raises the price, not the micro-batch's size. One price stays until pairs on one host fit that form.
    # Lease 68 ran both lease 67 pairs' 32k micro-batches on a fourth H100 host, once with the actor's parameters and
    # optimizer offloaded (a log-prob pass at 60 GiB in its steady steps against 75 without): 32 ps offloaded, 36 ps
    # not. The ~15 GiB the offload freed lowered the price by a ninth, within a single step's noise; the 1.5B's pairs
    # (~0 ps at ~70 GiB) fit no memory form either. The median of the eight pairs: 22.74 ps.
    unfused_logit_ps: float = 22.74
    # What a step costs outside its phases (reward, advantage, metrics, Ray dispatch), shown as verl's `adv` phase:
    # timing_s/step minus the phases' timings, 0.16-0.21 s (median 0.20) over the nine real verl 0.9.1 steps of the
    # H100 campaign (benchmarks/results/calibration.md). It was 2.6 s, fitted on the step time alone of one 2-layer
    # run, where it stood in for per-micro-batch costs of the Megatron passes that the model does not yet describe.
    fixed_step_s: float = 0.2

    @property
    def layer_form(self) -> bool:
        """Whether a pass's GPU work is priced by the layer form (verl 0.9.1's) rather than the share form."""
        return any(self.layer_bytes_forward) or any(self.layer_bytes_train)

    def decode_step_overhead(self, gpu: str, eager: bool) -> float:
        """The host's seconds a decode step (vLLM's scheduler, sampler, output processing), eager (added to the
        GPU's work) or with CUDA graphs on this GPU type (decode_step_seconds: hidden under a longer replay)."""
        if eager:
            return self.decode_step_overhead_s
        return dict(self.decode_step_overhead_graph_by_gpu).get(gpu, self.decode_step_overhead_graph_s)


DEFAULT_WORKLOAD = Workload()
# Update micro-batches under this many tokens (a GPU's) that are not single sequences pay Efficiency's
# small_micro_batch_layer_s or small_budget_micro_batch_layer_s (the host's work their GPU work leaves): every trial
# with micro-batches of 4 sequences of ~1.2k tokens (4.7k) or a budget of 8k or more ran without a cost per
# micro-batch, those of 2 sequences (2.4k) or a 4k budget with.
SMALL_MICRO_BATCH_TOKENS = 4500
# ... each kind its own constant (small_micro_batch_kind), as they measured apart
SMALL_MICRO_BATCH_COSTS = {"fixed": "small_micro_batch_layer_s", "dynamic": "small_budget_micro_batch_layer_s"}
REFERENCE_TFLOPS = 989.0  # H100 SXM bf16: the GPU the efficiencies were calibrated on
DEFAULT_EFFICIENCY = Efficiency()
# The verl 0.4-era tables (verl_megatron_practice) ran verl 0.4's Megatron workers, not verl 0.9.1's engine, whose
# cost per small update micro-batch (and per log-prob micro-batch) the campaign measured: grpo_qwen2.5_7b #7/#8 (8
# H100s, TP 4, micro-batches of 2 sequences, 2,048 a step at the Workload's lengths) ran its update in 300 s, 0.034 s
# a micro-batch above the model without that cost. Nor did their vLLM schedule a decode step while the GPU replayed
# the one before: #8, the one row with CUDA graphs, would step 64 s faster than #7 that way (its offload's cost in),
# where it measured 29 s. Those tables are judged with this (benchmarks/throughput_rank.py, offload_pairs.py), as
# their memory is with MCORE_013_CALIBRATION.
VERL_04_EFFICIENCY = replace(DEFAULT_EFFICIENCY, small_micro_batch_layer_s=0.0,
                             small_budget_micro_batch_layer_s=0.0, logprob_micro_batch_s=0.0, decode_overlap=False,
                             layer_bytes_forward=(0.0, 0.0), layer_bytes_train=(0.0, 0.0))
