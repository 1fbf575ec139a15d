"""minirl.infra.validation: every field of every CLI dataclass is checked from its type and its
range.

The bad values here are derived from the dataclasses themselves (for each field: the wrong types,
NaN and infinity, the first value outside its range), so a field added later is tested without
anyone listing it; only the hand-written expectations for `Range` are spelled out.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest

from minirl.config import (
    BenchArgs,
    BudgetArgs,
    CurvesArgs,
    EvalArgs,
    GRPOArgs,
    ModelArgs,
    OpenLoopArgs,
    StudyArgs,
    TaskArgs,
    ViewerArgs,
)
from minirl.infra.errors import ConfigError
from minirl.infra.validation import Range, check_fields, expected, field_hints, parse_ints
from minirl.study.validate import ValidateArgs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # train.py and evaluate.py are scripts at the repo root
import evaluate  # noqa: E402
import train  # noqa: E402

CLI_DATACLASSES = (
    *(ModelArgs, GRPOArgs, BudgetArgs, TaskArgs, EvalArgs, StudyArgs, BenchArgs),
    *(ViewerArgs, CurvesArgs, OpenLoopArgs, ValidateArgs),
)
FIELDS = [(cls, name) for cls in CLI_DATACLASSES for name in field_hints(cls)]


def plain(hint: Any) -> Any:
    """`float | None` -> float; anything else unchanged."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def bad_values(hint: Any, bounds: Range | None) -> list[Any]:
    """Values a field of this type and range must refuse, derived from the two alone."""
    optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
    base = plain(hint)
    bad: list[Any] = [[1, 2], {"a": 1}] + ([] if optional else [None])
    if typing.get_origin(base) is Literal:
        return [*bad, "no-such-choice", 1]
    if base is bool:
        return [*bad, "yes", 1, 0.5]
    if base is str:
        return [*bad, 5, 2.5, True]
    if typing.get_origin(base) is list:  # report_to: a list of names, each a string
        return [5, "tensorboard", [5], ["tensorboard", None], {"a": 1}, None]
    if base is int:
        bad += [True, 2.5, "3", 2**64]
    if base is float:
        bad += [True, "0.1", math.nan, math.inf, -math.inf]
    assert bounds is not None
    step = 1 if base is int else 1e-9
    for low, strict in ((bounds.ge, False), (bounds.gt, True)):
        if low is not None:
            bad.append(low if strict else low - step)
    for high, strict in ((bounds.le, False), (bounds.lt, True)):
        if high is not None:
            bad.append(high if strict else high + step)
    return bad


def test_every_field_has_a_checkable_type_and_every_number_a_range() -> None:
    for cls, name in FIELDS:
        hint, bounds = field_hints(cls)[name]
        expected(hint)  # raises TypeError for a type minirl.infra.validation cannot check
        if plain(hint) in (int, float):
            assert bounds is not None, (
                f"{cls.__name__}.{name} is a number without a Range: give it one in its "
                "annotation, e.g. Annotated[int, Range(ge=1)] (see minirl.config)"
            )


def test_the_defaults_pass() -> None:
    for cls in CLI_DATACLASSES:
        check_fields(cls())


@pytest.mark.parametrize(("cls", "name"), FIELDS, ids=[f"{c.__name__}.{n}" for c, n in FIELDS])
def test_every_bad_value_of_every_field_is_one_config_error_naming_it(cls: type, name: str) -> None:
    hint, bounds = field_hints(cls)[name]
    for value in bad_values(hint, bounds):
        args = cls()
        setattr(args, name, value)
        with pytest.raises(ConfigError) as err:
            check_fields(args)
        message = str(err.value)
        assert message.startswith(f"--{name} ") and "\n" not in message, (value, message)


def test_ints_stand_for_floats_and_are_stored_as_floats() -> None:
    args = GRPOArgs(learning_rate=1, epsilon_high=0)  # YAML's `learning_rate: 1` is an int
    check_fields(args)
    assert isinstance(args.learning_rate, float) and args.learning_rate == 1.0
    assert isinstance(args.epsilon_high, float)
    assert GRPOArgs(epsilon_high=None).epsilon_high is None
    check_fields(GRPOArgs(epsilon_high=None))


def test_range_membership_and_text() -> None:
    r = Range(ge=0, lt=1)
    assert 0 in r and 0.999 in r and 1 not in r and -1e-12 not in r
    assert str(r) == "in [0, 1)"
    assert str(Range(gt=0)) == "> 0" and 0 not in Range(gt=0) and 1e-300 in Range(gt=0)
    assert str(Range(ge=1, le=100)) == "in [1, 100]" and 100 in Range(ge=1, le=100)
    assert str(Range(ge=2)) == ">= 2" and str(Range(le=5)) == "<= 5"
    assert str(Range(ge=0, le=2**32 - 1)) == "in [0, 4294967295]"
    # NaN fails every comparison, so it is never in a range (check_value tests it first anyway).
    assert math.nan not in Range(ge=0) and math.nan not in Range(le=1)


def test_messages_name_the_flag_the_range_and_why() -> None:
    cases = [
        (GRPOArgs(max_grad_norm=-1.0), "--max_grad_norm must be > 0, got -1.0"),
        (
            GRPOArgs(eval_seeds=100_001),
            "--eval_seeds must be in [0, 100000], got 100001 "
            "(the held-out pool, tasks.EVAL_SEEDS, has 100000 instances)",
        ),
        (
            GRPOArgs(seed=10**23),
            "--seed must be in [0, 4294967295], got 100000000000000000000000 (seeds are 32-bit)",
        ),
        (TaskArgs(invalid_penalty=math.nan), "--invalid_penalty must be a finite number, got nan"),
        (TaskArgs(max_new_tokens=True), "--max_new_tokens true: expected an integer"),
        (ModelArgs(lora_dropout=1.5), "--lora_dropout must be in [0, 1), got 1.5"),
        (
            BudgetArgs(budget_max=101),
            "--budget_max must be in [1, 100], got 101 "
            "(the tiny model reads turn counts up to 100)",
        ),
        (GRPOArgs(temperature=None), "--temperature null: expected a number"),
        (GRPOArgs(output_dir=5), "--output_dir 5: expected a string"),
        (BudgetArgs(mode="sometimes"), "--mode 'sometimes': expected one of fixed, budgetmix"),
    ]
    for args, message in cases:
        with pytest.raises(ConfigError) as err:
            check_fields(args)
        assert str(err.value) == message


def test_parse_ints_checks_each_range_before_expanding_it() -> None:
    assert parse_ints("1-4,8,2", "t", 100, "") == [1, 2, 3, 4, 8]
    with pytest.raises(ConfigError, match="expected integers"):
        parse_ints("a-b", "t", 100, "")
    with pytest.raises(ConfigError, match=">= 1"):
        parse_ints("0,1", "k", 8, "")
    with pytest.raises(ConfigError, match=r"<= 100 \(why\)"):
        parse_ints("1-300000000", "t", 100, "why")  # would be 4.7 GB if it were expanded
    with pytest.raises(ConfigError, match="is empty"):
        parse_ints(" , ", "t", 100, "")


@pytest.mark.parametrize(
    "parser",
    [
        lambda: train.build_parser(),
        lambda: evaluate.build_parser(),
        lambda: evaluate.ArgParser(StudyArgs),
        lambda: evaluate.ArgParser(BenchArgs),
    ],
    ids=["train", "evaluate", "study", "bench"],
)
def test_help_shows_every_range(parser) -> None:
    p = parser()
    text = "".join(p.format_help().split())
    for cls in p.dataclass_types:
        for name, (_, bounds) in field_hints(cls).items():
            if bounds is not None:
                assert "".join(f"Range: {bounds}.".split()) in text, name


def test_cli_dataclasses_are_all_covered() -> None:
    # A new CLI dataclass must join CLI_DATACLASSES; this finds them by their HfArg fields.
    import minirl.config as config
    import minirl.study.validate as validate

    found = {
        obj
        for obj in [*vars(config).values(), *vars(validate).values()]
        if dataclasses.is_dataclass(obj)
        and isinstance(obj, type)
        and any("help" in f.metadata for f in dataclasses.fields(obj))
    }
    assert found == set(CLI_DATACLASSES)


def test_the_learning_rate_follows_the_base_model_unless_given(tmp_path: Path) -> None:
    """Unset, tiny (or a local base with a word-level tokenizer) trains at 1e-3 and a chat model
    at 2e-4 (1e-3 collapsed smollm2's replies); a given rate is kept; the resolved number is what
    the run records, so a resumed run compares like with like."""
    from minirl.config import CHAT_LEARNING_RATE, TINY_LEARNING_RATE, Config, tiny_like

    def rate(model: str, **grpo: object) -> float:
        return Config(ModelArgs(model=model), GRPOArgs(**grpo)).grpo.learning_rate

    word, bpe, odd = (tmp_path / name for name in ("word", "bpe", "odd"))
    for folder, text in (
        (word, '{"model": {"type": "WordLevel"}}'),
        (bpe, '{"model": {"type": "BPE"}}'),
        (odd, '["not", "a", "tokenizer"]'),
    ):
        folder.mkdir()
        (folder / "tokenizer.json").write_text(text)
    assert (TINY_LEARNING_RATE, CHAT_LEARNING_RATE) == (1e-3, 2e-4)
    assert [rate(m) for m in ("tiny", "tiny-sticky", str(word))] == [1e-3] * 3
    assert [rate(m) for m in ("smollm2", "Qwen/Qwen2.5-0.5B-Instruct", str(bpe), str(odd))] == [
        2e-4
    ] * 4
    assert rate("smollm2", learning_rate=5e-4) == 5e-4 and rate("tiny", learning_rate=3e-3) == 3e-3
    saved = Config(ModelArgs(model="smollm2")).to_dict()
    assert saved["grpo"]["learning_rate"] == 2e-4
    assert Config.from_dict(saved).grpo.learning_rate == 2e-4
    assert not tiny_like(str(tmp_path / "missing"))
