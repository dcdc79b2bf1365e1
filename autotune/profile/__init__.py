"""Where a configuration's step time goes, from verl's own profiler (or the Megatron-core probe's), and what to change.

`traces` finds and parses the trace files (HolisticTraceAnalysis), `kinds` names the work, `analysis` breaks each
phase down per rank, `advice` turns the numbers into changes the model predicts faster and fitting, `runs` re-runs a
configuration with the profiler on (the verl and mcore runners), `trim` cuts traces small enough to commit.

May import: the packages below it (the flat values, verl, candidate, job, estimate, store, search, results,
runners, executors, study), not dashboard/ or cli/.
"""
