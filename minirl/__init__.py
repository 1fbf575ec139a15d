"""minirl: multi-turn agentic RL (GRPO, BudgetMix, Pass@(K,T)) for small language models.

One file per step of the method, in the order data flows through a training step:

    config.py, errors.py      the settings of every command, and the one-line errors
    validation.py, cli.py     every field checked from its type; the CLIs' one error path
    models.py                 the policy: a 4-bit base with LoRA (tiny.py, smollm2.py: two bases)
    chat.py                   a conversation as token segments, with the assistant mask
    episode.py                the records: EpisodeSpec -> Episode (Turns, ids, masks, log-probs)
    rollout.py                task -> episodes: batched multi-turn generation
    budgets.py                the turn budget T of each group (fixed | budgetmix)
    rewards.py                episodes -> rewards (outcome, or per-turn process)
    grpo.py                   rewards -> advantages -> the clipped loss
    batch.py                  episodes -> tensors -> log-probs (the training forward)
    update.py                 loss -> gradient, one micro-batch at a time (accumulation)
    trainer.py                the loop: train() and train_step()
    checkpoint.py             atomic checkpoints, resume, the run directory's rules
    trackers.py               --report_to: tensorboard, trackio, wandb
    curves.py, viewer.py      what to look at: curves.png, episodes.html (samples.py: its data;
                              outputs.py: what both backends write at a run's start and end)
    trl_backend.py            the same pieces inside trl.GRPOTrainer
    eval/                     Pass@(K,T) and the behaviour analyses (evaluate.py)
    study/                    the paper's claims on toy tasks (evaluate.py --study)
    tools/                    the benchmark and the GPU memory estimate
    offline.py                no network unless a hub model is named
"""

import logging

from minirl import offline

# Before anything imports bitsandbytes: its CPU backend must not ask the hub for a kernel.
offline.install()
# bitsandbytes then logs a warning on CPUs with AVX512-BF16, as it does when the optional
# `kernels` package is absent; its built-in CPU kernels work without.
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
