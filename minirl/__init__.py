"""minirl: multi-turn agentic RL (GRPO, BudgetMix, Pass@(K,T)) for small language models.

The package is a pipeline of small modules; DESIGN.md's picture, in import order:
tasks/ -> chat -> rollout -> budgets -> grpo -> trainer, with models/tiny loading the policy.
"""

import logging

# bitsandbytes logs a warning at import on CPUs with AVX512-BF16 when the optional `kernels`
# package (which downloads a kernel from a hub) is absent; its built-in CPU kernels work without.
logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
