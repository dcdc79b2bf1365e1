"""Drives a study: the `Tuner`'s ask / prune / launch / tell loop (`study`, a launched trial's record and heartbeat in
`inflight`), what dead tuners left behind (`recovery`) and the live line of a running trial (`live`).

May import: every package below it: the flat values, verl, candidate, job, estimate, store, search, results, runners
and executors.
"""
