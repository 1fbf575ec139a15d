"""Every field of every command-line dataclass, checked against its type hint and its range.

The dataclasses in minirl.config declare each field's type, and a numeric field's range, in its
annotation:

    lora_r: Annotated[int, Range(ge=1)] = HfArg(default=16, help="LoRA rank ...")

HfArgumentParser reads the plain type (`typing.get_type_hints` drops `Annotated` metadata), so
argparse converts the command line as it always did. `check_fields` reads the same annotation
with its metadata and checks every value, however it arrived: from a flag, from a `--config` YAML
file (argparse never converts a YAML value that is not a string, so `max_steps: [1, 2]` arrives as
a list and `max_new_tokens: true` as a bool), or from a dataclass built in Python. `range_help`
writes each range into `--help` from the same `Range`, so the help and the check cannot drift,
and a field added later is checked without anyone listing it.

The rules, from the type alone:
- `int`: an int that is not a bool (YAML's `true` is one), within int64;
- `float`: an int or a float that is finite (NaN fails no `<` comparison, so every `x <= 0` check
  lets it through: finiteness is tested first); an int is stored as a float;
- `bool`: true or false; `str`: a string; `Literal[...]`: one of its values;
  `X | None`: None or an X;
then the field's `Range`, which every int and float field declares (tests/test_validation.py
fails on one that does not).

Two checks of text flags live here too, for the same reason (no model loads before they pass):
`parse_ints` reads K and T lists such as '1-4,8' and bounds each range before expanding it, and
`check_model` refuses a `--model` that names no model, without asking the network.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from minirl.infra.errors import ConfigError, ModelLoadError

INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Range:
    """The values a numeric field may take: `ge`/`gt` below, `le`/`lt` above (None = open).

    `why` says, in the error message, why a bound is there when it is not obvious.
    """

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    why: str = ""

    def __contains__(self, x: float) -> bool:
        return (
            (self.ge is None or x >= self.ge)
            and (self.gt is None or x > self.gt)
            and (self.le is None or x <= self.le)
            and (self.lt is None or x < self.lt)
        )

    def __str__(self) -> str:
        low = (self.ge, "[", ">=") if self.ge is not None else (self.gt, "(", ">")
        high = (self.le, "]", "<=") if self.le is not None else (self.lt, ")", "<")
        if low[0] is not None and high[0] is not None:
            return f"in {low[1]}{fmt(low[0])}, {fmt(high[0])}{high[1]}"
        if low[0] is not None:
            return f"{low[2]} {fmt(low[0])}"
        if high[0] is not None:
            return f"{high[2]} {fmt(high[0])}"
        return "any value"


def fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def split_hint(hint: Any) -> tuple[Any, Range | None]:
    """`Annotated[T, Range(...)]` -> (T, the Range); a plain T -> (T, None)."""
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
        ranges = [x for x in extras if isinstance(x, Range)]
        return base, ranges[0] if ranges else None
    return hint, None


def field_hints(cls: type) -> dict[str, tuple[Any, Range | None]]:
    """Each field of dataclass `cls`: (its type, its Range or None)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: split_hint(hints[f.name]) for f in dataclasses.fields(cls)}


def expected(hint: Any) -> str:
    """What a value of type `hint` looks like, for an error message."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else expected(a) for a in args)
    if origin is list:
        return f"a list of {expected(args[0]).split(' ', 1)[1]}s"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    raise TypeError(f"minirl.infra.validation cannot check values of type {hint!r}")


def convert(value: Any, hint: Any) -> tuple[bool, Any]:
    """(does `value` have type `hint`, the value as stored); ints become floats for floats."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return value in args, value
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return type(None) in args, None
        for arg in (a for a in args if a is not type(None)):
            ok, converted = convert(value, arg)
            if ok:
                return True, converted
        return False, value
    if origin is list:  # e.g. report_to: every element has the element type
        if not isinstance(value, list):
            return False, value
        items = [convert(item, args[0]) for item in value]
        return all(ok for ok, _ in items), [item for _, item in items]
    if hint is bool:
        return isinstance(value, bool), value
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if hint is float:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return number, float(value) if number else value
    if hint is str:
        return isinstance(value, str), value
    expected(hint)  # raises TypeError: a field type this module does not know
    return False, value


def shown(value: Any) -> str:
    """A value as the user wrote it: YAML's null, true and false rather than Python's names."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return repr(value)


def check_value(name: str, value: Any, hint: Any, bounds: Range | None) -> Any:
    """`value` as the field stores it; ConfigError naming `--name` if it is not allowed."""
    ok, value = convert(value, hint)
    if not ok:
        raise ConfigError(f"--{name} {shown(value)}: expected {expected(hint)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"--{name} must be a finite number, got {value}")
    if bounds is not None and value is not None and value not in bounds:
        why = f" ({bounds.why})" if bounds.why else ""
        raise ConfigError(f"--{name} must be {bounds}, got {value!r}{why}")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
        raise ConfigError(f"--{name} {value} is too large")
    return value


def check_fields(args: Any) -> None:
    """Check (and, where an int stands for a float, convert) every field of dataclass `args`."""
    for name, (hint, bounds) in field_hints(type(args)).items():
        setattr(args, name, check_value(name, getattr(args, name), hint, bounds))


def parse_ints(text: str, flag: str, largest: int, why: str) -> list[int]:
    """'1,2,4' or '1-8' or '1-4,8' -> sorted distinct ints in 1..largest (ConfigError names flag).

    Each range is checked before it is expanded, so '1-300000000' is an error, not 4.7 GB.
    """
    values: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        bounds = part.split("-", 1) if "-" in part[1:] else [part, part]
        try:
            low, high = int(bounds[0]), int(bounds[1])
        except ValueError as err:
            raise ConfigError(f"--{flag} {text!r}: expected integers like 1,2,4 or 1-8") from err
        if low > high:
            raise ConfigError(f"--{flag} {text!r}: range {part} is empty")
        if low < 1:
            raise ConfigError(f"--{flag} {text!r}: values must be >= 1")
        if high > largest:
            raise ConfigError(f"--{flag} {text!r}: values must be <= {largest} ({why})")
        values.update(range(low, high + 1))
    if not values:
        raise ConfigError(f"--{flag} is empty: give at least one value")
    return sorted(values)


# A hub id names its owner: "Qwen/Qwen2.5-0.5B-Instruct". A bare word that is neither `tiny`,
# `smollm2` nor a directory (a typo such as "tinyx") is refused without asking the network.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
# The embedded bases: `tiny` (uniform-noise demonstrations) and the variants whose base has a
# recovery deficit (minirl.tiny.DEMONSTRATORS; a test keeps the two lists in step).
TINY_MODELS: tuple[str, ...] = ("tiny", "tiny-sticky", "tiny-truncated")
MODEL_CHOICES = (
    "'tiny' (or 'tiny-sticky', 'tiny-truncated'), 'smollm2', a model directory, or a hub id like "
    "Qwen/Qwen2.5-0.5B-Instruct"
)


def check_model(name: str) -> None:
    """Refuse, before anything loads, a --model that names no model (ModelLoadError)."""
    if name in TINY_MODELS or name == "smollm2":
        return
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            adapter = (path / "adapter_config.json").is_file() or any(path.glob("checkpoint-*"))
            hint = " (it holds a LoRA adapter: evaluate it with evaluate.py --checkpoints)"
            raise ModelLoadError(
                f"--model {name!r} is a directory without config.json, not a model"
                f"{hint if adapter else ''}; use {MODEL_CHOICES}"
            )
        return
    if path.exists() or name.startswith((".", "/", "~")) or not HUB_ID.fullmatch(name):
        raise ModelLoadError(f"--model {name!r}: no such model directory; use {MODEL_CHOICES}")


def range_help(dataclass_types: typing.Iterable[type]) -> dict[str, str]:
    """Field name -> the text --help adds to its help: the field's range."""
    return {
        name: f"Range: {bounds}." + (f" ({bounds.why})" if bounds.why else "")
        for cls in dataclass_types
        for name, (_, bounds) in field_hints(cls).items()
        if bounds is not None
    }
