"""What to try next: the search space (`space`), what a study is for (`setup`), the model's exact ranking of a space
(`ranking`, cut along `split` into memoised `pieces`, with `domain` for a runner's finite list), the study's plan
(`plan`), the corrected model fitted from measured trials (`learning`) and the Optuna sampler that puts the plan ahead
of TPE (`samplers`).

May import: the flat values, verl, candidate, job, estimate and store.
"""
