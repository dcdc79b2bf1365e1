"""What users take away from a study: trial labels (`labels`), the end-of-run report (`report`), a trial's timeline
(`timeline`) and memory per moment (`memory_trace`), the measured noise and ties (`noise`), predictions made at
guessed lengths (`guessed`) and the exports (`export`: sh, yaml, json, ray; the verl runner's argv comes from the
same code).

May import: the flat values, verl, candidate, job, estimate, store and search.
"""
