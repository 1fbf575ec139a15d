"""`python -m minirl.tools.step_memory [train.py flags]`: the peak memory of one training step.

One process per measurement, so that no step inherits another's allocator state. The
process loads the policy as `train.py` does, records its memory after loading, plays and trains
one step (rollout and update: `minirl.trainer.train_step`, or one optimizer step of
`trl.GRPOTrainer` for `--backend trl`), and prints one JSON line:

    {"backend": ..., "episodes": E, "loaded_mb": ..., "peak_mb": ..., "seconds": ...}

`peak_mb` is the step's peak: on the CPU the resident set's high-water mark, reset after loading
(minirl.tools.measure; loading a 4-bit model can peak higher than a small step, and would hide
it), with the loaded model still counted; `torch.cuda.max_memory_allocated` on CUDA.
`python -m minirl.tools.bench` runs this at several episodes per step for its memory part.
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time

import torch

from minirl.config import BudgetArgs, Config, GRPOArgs, ModelArgs, TaskArgs, validate
from minirl.infra.cli import ArgParser, run_cli
from minirl.tools.measure import peak_memory_mb, reset_peak_memory, sync


def resident_mb() -> float:
    """This process's resident memory now (CPU), or the CUDA memory allocated now."""
    if torch.cuda.is_available():
        return torch.cuda.memory_allocated() / 2**20
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import resource

    return pages * resource.getpagesize() / 2**20


def one_step(cfg: Config) -> dict:
    """Load the policy, then train one step of `cfg` on its backend; memory and seconds."""
    from minirl.models import load_policy

    torch.manual_seed(cfg.grpo.seed)
    model, tokenizer = load_policy(
        cfg.model.model,
        cfg.model.quant,
        cfg.model.lora_r,
        cfg.model.lora_alpha,
        cfg.model.lora_dropout,
        task=cfg.task.task,
        gradient_checkpointing=cfg.grpo.gradient_checkpointing,
        dtype=cfg.model.dtype,
    )
    loaded = resident_mb()
    reset_peak_memory()
    start = time.perf_counter()
    if cfg.grpo.backend == "minirl":
        from minirl.trainer import train_step

        optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=cfg.grpo.learning_rate
        )
        train_step(model, tokenizer, optimizer, cfg, random.Random(cfg.grpo.seed), 0)
    else:
        from minirl.trl_backend import build_trainer

        with tempfile.TemporaryDirectory() as tmp:
            cfg.grpo.output_dir, cfg.grpo.max_steps, cfg.grpo.save_steps = tmp, 1, 10**6
            build_trainer(cfg, model, tokenizer, tmp, progress=False).train()
    sync()
    return {
        "backend": cfg.grpo.backend,
        "episodes": cfg.task.tasks_per_step * cfg.grpo.num_generations,
        "loaded_mb": loaded,
        "peak_mb": peak_memory_mb(),
        "seconds": time.perf_counter() - start,
    }


def parse_config(argv: list[str]) -> Config:
    """train.py's flags as a Config (no evaluation: only the step is measured)."""
    parser = ArgParser(
        (ModelArgs, GRPOArgs, BudgetArgs, TaskArgs),
        prog="minirl.tools.step_memory",
        description=__doc__.split("\n")[0],
        allow_abbrev=False,  # as train.py: a prefix (--learning_rat) must not set a flag
    )
    model, grpo, budget, task = parser.parse_args_into_dataclasses(args=argv)
    cfg = Config(model, grpo, budget, task)
    cfg.grpo.eval_seeds = 0
    validate(cfg)
    return cfg


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)

    def work() -> int:
        print(json.dumps(one_step(parse_config(args))), flush=True)
        return 0

    return run_cli("minirl.tools.step_memory", work, lambda: "nothing is kept")


if __name__ == "__main__":
    sys.exit(main())
