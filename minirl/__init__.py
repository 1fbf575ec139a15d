"""minirl: multi-turn agentic RL (GRPO, BudgetMix, Pass@(K,T)) for small language models.

One file per step of the method, in the order data flows through a training step:

    config.py, errors.py      the settings of every command, and the one-line errors
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
    trl_backend.py            the same pieces inside trl.GRPOTrainer
    eval/                     Pass@(K,T) and the behaviour analyses (evaluate.py)
    study/                    the paper's claims on toy tasks (evaluate.py --study)
    tools/                    the benchmark and the GPU memory estimate
"""

import logging

# bitsandbytes logs a warning at import on CPUs with AVX512-BF16 when the optional `kernels`
# package (which downloads a kernel from a hub) is absent; its built-in CPU kernels work without.
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
