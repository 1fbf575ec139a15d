"""Train a LoRA policy with multi-turn GRPO, at a fixed turn budget or with BudgetMix.

    python train.py --mode budgetmix                # the default: tiny model, gridnav, T in 4..12
    python train.py --mode fixed --budget 8 --steps 60
    python train.py --config run.yaml --seed 3        # YAML sets defaults, flags override
    python train.py --output_dir runs/x --resume      # continue a killed run
    python train.py --backend trl                     # the same run through trl.GRPOTrainer
    accelerate launch train.py --backend trl          # ... on every GPU accelerate is set up for

Every flag comes from the dataclasses in minirl/config.py (`python train.py --help`). Bad values
print one line naming the flag and exit with status 2; nothing is trained. Every other expected
failure is one line too (minirl/infra/cli.py): a run that cannot finish (diverged, disk full) exits
1, Ctrl-C exits 130, each saying which checkpoint `--resume` will continue from.
"""

from __future__ import annotations

import sys

import yaml
from trl import TrlParser

from minirl.config import BudgetArgs, Config, GRPOArgs, ModelArgs, TaskArgs, validate

# Only the light modules load before parsing: torch, peft and bitsandbytes take seconds to import,
# and --help or a bad flag should answer at once.
from minirl.infra.cli import ArgParser, run_cli


class Parser(ArgParser, TrlParser):
    """TRL's parser (flags plus `--config FILE.yaml`) with minirl's one-line errors."""


def build_parser() -> Parser:
    parser = Parser(
        (ModelArgs, GRPOArgs, BudgetArgs, TaskArgs),
        prog="train.py",
        description=__doc__.split("\n")[0],
        # A typo that happens to be a prefix (--learning_rat, --eval) must not silently set a flag.
        allow_abbrev=False,
    )
    # TrlParser takes `--config FILE` out of the arguments before argparse sees them; declaring it
    # here only puts it in --help.
    parser.add_argument(
        "--config",
        metavar="FILE.yaml",
        help="YAML mapping of flag names to values (e.g. 'budget_min: 2'); it replaces the "
        "defaults, and flags on the command line override it.",
    )
    return parser


def parse(argv: list[str] | None = None) -> Config:
    """The Config for `argv` (default sys.argv[1:]); bad flags exit with status 2 and one line."""
    parser = build_parser()
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[-1] == "--config":
        parser.error("argument --config: expected one argument")
    try:
        parsed = parser.parse_args_and_config(args)
    except OSError as err:  # a --config file that cannot be read
        parser.error(f"argument --config: {err.strerror}: {err.filename}")
    except yaml.YAMLError as err:
        parser.error(f"argument --config: not valid YAML ({str(err).splitlines()[0]})")
    except ValueError as err:  # unknown flags, on the command line or as YAML keys
        parser.error(str(err).splitlines()[0])
    # A fifth item, the namespace holding only the (already consumed) --config, is dropped.
    model, grpo, budget, task = parsed[:4]
    return Config(model, grpo, budget, task)


def main(argv: list[str] | None = None) -> int:
    cfg = parse(argv)
    return run_cli("train.py", lambda: run(cfg), lambda: resume_hint(cfg))


def run(cfg: Config) -> int:
    validate(cfg)  # before the heavy imports, so a bad value fails fast
    if cfg.grpo.backend == "trl":
        from minirl.trl_backend import train_trl as train
    else:
        from minirl.trainer import train

    from minirl.rundir.outputs import before_after

    result = train(cfg)
    for line in before_after(result.summary, cfg.task.task):
        print(line)
    print(f"metrics, checkpoints and summary.json in {result.output_dir}")
    return 0


def resume_hint(cfg: Config) -> str:
    """What a failed or interrupted run leaves: the checkpoint --resume continues from."""
    from minirl.rundir.checkpoint import checkpoints

    found = checkpoints(cfg.output_dir)
    if not found:
        return f"no checkpoint was written to {cfg.output_dir}, so there is nothing to resume"
    return f"the same command with --resume continues from {found[-1]}"


if __name__ == "__main__":
    sys.exit(main())
