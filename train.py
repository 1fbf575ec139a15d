"""Train a LoRA policy with multi-turn GRPO, at a fixed turn budget or with BudgetMix.

    python train.py --mode budgetmix                # the default: tiny model, gridnav, T in 4..12
    python train.py --mode fixed --budget 8 --steps 60
    python train.py --config run.yaml --seed 3        # YAML sets defaults, flags override
    python train.py --output_dir runs/x --resume      # continue a killed run

Every flag comes from the dataclasses in minirl/config.py (`python train.py --help`). Bad values
print one line naming the flag and exit with status 2; nothing is trained.
"""

from __future__ import annotations

import sys

from trl import TrlParser  # after minirl, which quiets a bitsandbytes import-time warning

from minirl.checkpoint import CheckpointError
from minirl.config import BudgetArgs, Config, ConfigError, GRPOArgs, ModelArgs, TaskArgs
from minirl.models import ModelLoadError


def parse(argv: list[str] | None = None) -> Config:
    parser = TrlParser(
        (ModelArgs, GRPOArgs, BudgetArgs, TaskArgs), description=__doc__.split("\n")[0]
    )
    model, grpo, budget, task = parser.parse_args_and_config(argv)
    return Config(model, grpo, budget, task)


def main(argv: list[str] | None = None) -> int:
    cfg = parse(argv)
    from minirl.trainer import train  # heavy imports after --help and flag errors

    try:
        result = train(cfg)
    except (ConfigError, CheckpointError, ModelLoadError) as err:
        print(f"train.py: error: {err}", file=sys.stderr)
        return 2
    summary = result.summary
    if "base" in summary and "trained" in summary:
        print(f"held-out success on {cfg.task.task} (base -> trained):")
        for budget, base in summary["base"].items():
            trained = summary["trained"][budget]
            print(f"  T={budget:>2}: {base['success']:.3f} -> {trained['success']:.3f}")
    print(f"metrics, checkpoints and summary.json in {result.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
