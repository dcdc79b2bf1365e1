"""autotune: finds the fastest configuration of a verl Megatron GRPO job on a given GPU cluster."""

__version__ = "0.1.0"
