"""minirl: multi-turn agentic RL (GRPO, BudgetMix, Pass@(K,T)) for small language models.

One file per step of the method, in the order data flows through a training step:

    config.py                 the settings of every command (TRL's names), one dataclass each
    models.py                 the policy: a 4-bit base with LoRA (tiny.py builds the tiny base)
    chat.py                   a conversation as token segments, with the assistant mask
    episode.py                the records: EpisodeSpec -> Episode (Turns, ids, masks, log-probs)
    rollout.py                task -> episodes: every episode of a step, one turn at a time
    engine.py                 the sampler: a dense copy of the policy, a preallocated KV cache
                              (hf_generate.py: transformers' generate, the reference)
    budgets.py                the turn budget T of each group (fixed | budgetmix)
    groups.py                 a step's groups, dropping tied ones with --dynamic_sampling
    rewards.py                episodes -> rewards (outcome, or per-turn process)
    grpo.py                   rewards -> advantages -> the clipped loss
    logprobs.py               episodes -> tensors -> log-probs (the training forward)
    update.py                 loss -> gradient, one micro-batch at a time, and the optimizer step
    trainer.py                the loop: train() and train_step()
    trl_backend.py            the same pieces inside trl.GRPOTrainer
    compare.py                checkpoints side by side on identical instances (evaluate.py)
    eval/                     Pass@(K,T) and the behaviour analyses compare() runs
    study/                    the paper's claims on toy tasks (evaluate.py --study)
    tools/                    the benchmark, the GPU memory estimate, the notebooks' generator
    rundir/                   what a run leaves behind: checkpoints, trackers, curves.png,
                              episodes.html
    infra/                    the plumbing under everything: one-line errors and field checks,
                              the model cache, progress bars, offline mode
"""

import logging

from minirl.infra import offline

# Before anything imports bitsandbytes: its CPU backend must not ask the hub for a kernel.
offline.install()
# bitsandbytes then logs a warning on CPUs with AVX512-BF16, as it does when the optional
# `kernels` package is absent; its built-in CPU kernels work without.
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
