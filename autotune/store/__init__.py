"""The record of every study: autotune's tables beside Optuna's (`schema`: studies, trials, steps, profiles,
corrections), the sessions over them and the atomic launch claim (`store`), which tuners are alive and who owns each
asked trial (`tuners`), and the database's access checks and their errors (`access`).

May import: the flat values, verl, candidate, job and estimate (the safer near-equals that `Store.best` applies).
"""
