"""Evaluate checkpoints with Pass@(K,T) and the behaviour analyses, on held-out instances.

    python evaluate.py --checkpoints base,runs/budgetmix-gridnav --k 1,2,4,8 --t 1-8
    python evaluate.py --checkpoints base --budget-hidden --n 8 --instances 100 --output runs/eval
    python evaluate.py --study --output study/      # train what is missing, evaluate, report.md

Every compared checkpoint plays the same instances from the same seed. The terminal shows one
table per checkpoint and the deltas against the first; --output gets results.json, results.jsonl
and PNG plots (see minirl/compare.py), and episodes.html, the checkpoints' episodes on the
same instances side by side (minirl/rundir/viewer.py). Flags come from `EvalArgs` in
minirl/config.py. Bad input prints one line and exits with status 2; every other expected failure (a
corrupt checkpoint, an unwritable --output, Ctrl-C) is one line too (minirl/infra/cli.py). `--study`
takes the flags of `StudyArgs` instead (see minirl/study/run.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from minirl.config import EvalArgs, StudyArgs, validate_eval, validate_study
from minirl.infra.cli import ArgParser, run_cli


def build_parser() -> ArgParser:
    parser = ArgParser(
        EvalArgs, prog="evaluate.py", description=__doc__.split("\n")[0], allow_abbrev=False
    )
    parser.add_argument(
        "--budget-hidden",
        "--budget_hidden",
        dest="budget_visible",
        action="store_false",
        help="Hide the budget: one rollout at max T, truncated to every T (faster).",
    )
    return parser


def parse(argv: list[str] | None = None) -> EvalArgs:
    (args,) = build_parser().parse_args_into_dataclasses(
        args=list(sys.argv[1:] if argv is None else argv)
    )
    return args


def study_main(argv: list[str]) -> int:
    parser = ArgParser(
        StudyArgs, prog="evaluate.py", description="Run the study", allow_abbrev=False
    )
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    kept = f"finished runs are kept in {args.output}: the same command continues the study"
    return run_cli("evaluate.py", lambda: study(args, argv), lambda: kept)


def study(args: StudyArgs, argv: list[str]) -> int:
    validate_study(args)
    from minirl.rundir.checkpoint import sole_writer
    from minirl.study.report import write_report
    from minirl.study.run import run_study

    with sole_writer(args.output, "--output"):  # one study writes its directory at a time
        done = run_study(args)
        command = "python evaluate.py --study " + " ".join(argv)
        report = write_report(done, Path(args.output), command)
    print(f"study finished in {done.timings['total_seconds'] / 60:.1f} min; report: {report}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--study" in argv:
        return study_main([a for a in argv if a != "--study"])
    args = parse(argv)
    kept = f"{args.output} holds no complete results"
    return run_cli("evaluate.py", lambda: run(args), lambda: kept)


def run(args: EvalArgs) -> int:
    validate_eval(args)  # before the heavy imports, so bad flags fail at once
    from minirl.compare import compare, write_outputs
    from minirl.eval.tables import print_tables
    from minirl.rundir.checkpoint import sole_writer
    from minirl.rundir.viewer import write_page

    # Checked writable before hours of evaluation, not after; and written by one process at once.
    with sole_writer(args.output, "--output"):
        samples = Path(args.output) / "episodes.json"  # a few episodes of each, for the viewer
        samples.unlink(missing_ok=True)
        results = compare(args, samples=samples)
        print_tables(results)
        written = [*write_outputs(results, args.output), samples, write_page(args.output)]
    print(f"wrote {len(written)} files to {args.output}: " + ", ".join(p.name for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
