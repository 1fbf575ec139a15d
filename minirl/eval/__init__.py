"""Evaluation: the same batched rollout as training, on held-out instances, with no update.

sampler.py   n episodes per instance at every turn budget T (the one sampler)
passkt.py    the unbiased Pass@(K,T) estimator and its K x T grid
analysis.py  where RL helps: single-step quality on fixed states, recovery, horizon
openloop.py  the open-loop yardstick: what the best policy that never reads an observation wins
feedback.py  feedback use: how much a policy's replies depend on what it was told (bits per turn)
results.py   the typed results of an evaluation, and results.json
tables.py, plots.py   the terminal tables and the PNGs

minirl/compare.py, evaluate.py's engine, puts these together for several checkpoints; it lives
beside trainer.py because it reads and writes run directories (minirl.rundir), which sit above
these pieces.
"""
