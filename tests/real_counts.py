"""How many committed real verl trials (tests/data/real_verl_gpu/) the tests that judge the model read: one place to
bump when a lease's trials are committed (each lease's trials are in benchmarks/results/real_verl_gpu.md). Pinned
rather than counted so that a trial lost from the data, or read twice, fails the tests that count them."""

VERDICTS = 280  # trials with a verdict: ok or out of memory (two killed for a shared node's memory are neither)
MEASURED = 270  # of them, trials with a measured step 3
TRACED = 269  # of them, trials with an NVML trace: lease 48's cut c-1.5b-h44 #5 left none
MEASURED_ON_HOST_MISSES = 120  # measured trials on known_misses.HOST_MISSES' hosts (the others: MEASURED less these)
