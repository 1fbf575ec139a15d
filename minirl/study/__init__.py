"""The study: the paper's claims asked of arms trained and evaluated on the same toy tasks.

run.py      train every arm where missing, evaluate them on shared instances, study.json
claims.py   each claim as a number, an uncertainty and a verdict rule
report.py   report.md: the verdicts, tables and plots, laid out per claim
plots.py    the study's own plots (gap against T, where RL helps)
"""
