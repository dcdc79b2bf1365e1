"""What a traced event is spent on: GEMM, attention, communication, memory copy or other work.

GPU kernels are split first by HolisticTraceAnalysis' own kernel types (NCCL = communication, Memcpy/Memset = memory,
the rest computation), then computation by name into GEMM, attention and other. CPU ops (traces without kernels:
CPU-only runs and the tests) are named by the operator (aten::mm is a GEMM, c10d::allreduce_ communication,
aten::copy_ a copy); the same words find the same work on either side.
"""

from __future__ import annotations

import re

GEMM = "gemm"
ATTENTION = "attention"
COMMUNICATION = "communication"
MEMORY = "memory"
OTHER = "other"
IDLE = "idle"
# Every instant of a phase is one of these, in this order of precedence (compute before communication and copies:
# what shows of those is what no computation hides, the exposed part).
KINDS = (GEMM, ATTENTION, OTHER, COMMUNICATION, MEMORY)
COMPUTE = (GEMM, ATTENTION, OTHER)

_COMM = re.compile(
    r"nccl|c10d::|gloo|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|"
    r"sendrecv|cross_device_reduce|custom_?ar|one_?shot|two_?shot|multimem", re.I)
# Point-to-point transfers: pipeline stages passing activations (waiting on a peer shows as a long one).
_P2P = re.compile(r"sendrecv|send_?recv|c10d::(?:send|recv)|gloo:(?:send|recv)|nccl:(?:send|recv)|"
                  r"batch_isend_irecv|\bp2p\b|_p2p_", re.I)
_ATTENTION = re.compile(r"attention|attn|flash|fmha|sdpa|paged_?att|reshape_and_cache|mha_|_mha|fwd_kernel_.*kv",
                        re.I)
_MEMORY = re.compile(r"^memcpy|^memset|aten::copy_|aten::_to_copy|aten::to$|aten::_copy_from|cudamemcpy|"
                     r"\b(?:dtoh|htod|dtod)\b", re.I)
_GEMM = re.compile(r"gemm|gemv|matmul|cutlass|xmma|nvjet|cublas|wgmma|aten::(?:mm|addmm|bmm|baddbmm|linear|"
                   r"_grouped_mm|_scaled_mm)$|grouped_?mm|splitk|sm\d+_.*(?:tn|nt|nn|tt)\b", re.I)
_HOST_COPY = re.compile(r"\b(?:dtoh|htod)\b|pinned|pageable", re.I)


def op_kind(name: str) -> str:
    """The kind of a CPU op by its name (an op nested in attention or communication is counted as that; see
    analysis)."""
    if _COMM.search(name):
        return COMMUNICATION
    if _ATTENTION.search(name):
        return ATTENTION
    if _MEMORY.search(name):
        return MEMORY
    if _GEMM.search(name):
        return GEMM
    return OTHER


def kernel_kind(name: str, hta_type: str) -> str:
    """The kind of a GPU kernel, memcpy or memset: HolisticTraceAnalysis' type, computation split by name."""
    if hta_type == "COMMUNICATION":
        return COMMUNICATION
    if hta_type == "MEMORY":
        return MEMORY
    if _COMM.search(name):  # vLLM's custom all-reduce kernels carry no "nccl"
        return COMMUNICATION
    if _ATTENTION.search(name):
        return ATTENTION
    if _GEMM.search(name):
        return GEMM
    return OTHER


def is_p2p(name: str) -> bool:
    return bool(_P2P.search(name))


def is_host_copy(name: str) -> bool:
    """A copy between host and device (offload, or data brought to the GPU), not one inside the GPU."""
    return bool(_HOST_COPY.search(name))
