"""Drives a study: the `Tuner`'s ask / prune / launch / tell loop (`study`, with its trial helpers in `trials`), what
dead tuners left behind (`recovery`) and the live line of a running trial (`live`).

May import: every package below it: the flat values, verl, candidate, job, estimate, store, search, results, runners
and executors.
"""
