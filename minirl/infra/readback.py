"""Reading back what a run wrote: JSON files checked against a schema before anything uses them.

A run's files (episodes.json, summary.json, study.json) are read again later: by the episode
viewer, by `--resume`, by the study when it decides what to reuse. By then they may be torn by a
crash, edited by hand, or planted by someone else (a page built from them is shared in a course).
So nothing read back is used as it comes:

- `read_json(path)` returns the file's JSON value, or raises `DataError` with one line naming the
  file and what is wrong: not UTF-8 (which byte), not JSON (where), nested too deeply, a number
  with too many digits. Python's own errors here are a RecursionError, a ValueError about integer
  digits, a UnicodeDecodeError: each would be a traceback.
- `check_json(value, hint, where)` checks a JSON value against a type, the way
  minirl.infra.validation checks a flag: a dataclass is a JSON object with its fields (a field
  without a default is required; keys the dataclass does not name are dropped, so nothing unchecked
  gets through), `list[X]`, `dict[str, X]`, `X | None`, `Literal[...]`, `int` (not a bool, within
  int64), `float` (an int or a float), `bool`, `str`, and `Annotated[X, Range(...)]` for a range.
  It returns the value as plain JSON data (dicts and lists), so code that reads `record["seed"]`
  is unchanged, but every value it reads has the type the schema says. `where` names the place in
  messages: "FILE:" for a whole file, which gives "FILE: episodes['base'][0].seed: expected an
  integer, got '7<script>'".

One schema per file lives next to the code that writes it (minirl.rundir.sample_episodes,
minirl.study.run).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Literal

from minirl.infra.errors import DataError
from minirl.infra.validation import INT64_MAX, expected, split_hint


def read_json(path: str | Path) -> Any:
    """The JSON value in the file at `path`; DataError, naming the file, if it holds none."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise DataError(f"{path} cannot be read ({err.strerror or err})") from err
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"{path}: byte {err.start} is not UTF-8, so this is not a JSON file"
        ) from err
    return parse_json(text, str(path))


def parse_json(text: str, where: str) -> Any:
    """json.loads with every failure as a DataError naming `where`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{where}: not valid JSON ({err.msg} at line {err.lineno})") from err
    except RecursionError as err:  # "[[[[...": json recurses once per level
        raise DataError(f"{where}: nested too deeply to be one of minirl's files") from err
    except ValueError as err:  # Python refuses integers of more than 4300 digits
        raise DataError(f"{where}: a number has more digits than Python reads ({err})") from err


def shown(value: Any, width: int = 40) -> str:
    """A value for an error message: a scalar's repr cut to `width` characters, else its kind
    (the repr of a list nested a thousand deep would itself fail)."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    text = "null" if value is None else repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def check_json(value: Any, hint: Any, where: str) -> Any:
    """`value` checked against type `hint` (see the module docstring); DataError naming `where`."""
    hint, bounds = split_hint(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return _check_object(value, hint, where)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for arm in args:
            try:
                return check_json(value, arm, where)
            except DataError:
                continue
        raise DataError(f"{_at(where)} expected {_expected(hint)}, got {shown(value)}")
    if origin is list:
        if not isinstance(value, list):
            raise DataError(f"{_at(where)} expected a list, got {shown(value)}")
        return [check_json(item, args[0], f"{where}[{i}]") for i, item in enumerate(value)]
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise DataError(f"{_at(where)} expected an object, got {shown(value)}")
        item = args[1] if args else Any
        return {key: check_json(v, item, f"{where}[{key!r}]") for key, v in value.items()}
    if not _scalar_ok(value, hint):
        raise DataError(f"{_at(where)} expected {_expected(hint)}, got {shown(value)}")
    if hint is float:
        value = float(value)
    if bounds is not None and value not in bounds:
        raise DataError(f"{_at(where)} must be {bounds}, got {shown(value)}")
    return value


def _scalar_ok(value: Any, hint: Any) -> bool:
    if typing.get_origin(hint) is Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) <= INT64_MAX
    if hint is float:
        # A float from an int: a 400-digit int would overflow, so ints are bounded as above.
        return _scalar_ok(value, int) or isinstance(value, float)
    if hint is str:
        return isinstance(value, str)
    raise TypeError(f"minirl.infra.readback cannot check values of type {hint!r}")


def _expected(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_expected(a) for a in typing.get_args(hint))
    if dataclasses.is_dataclass(hint) or typing.get_origin(hint) in (dict, list):
        return "an object" if typing.get_origin(hint) is not list else "a list"
    return expected(split_hint(hint)[0])


def _at(where: str) -> str:
    """`where` as the start of a message: "FILE:" stays, "FILE: a.b" becomes "FILE: a.b:"."""
    return where if where.endswith(":") else f"{where}:"


def _child(where: str, name: str) -> str:
    """The place of field `name` inside `where`: "FILE: name" at the top, "where.name" below."""
    return f"{where} {name}" if where.endswith(":") else f"{where}.{name}"


def _check_object(value: Any, cls: type, where: str) -> dict:
    if not isinstance(value, dict):
        raise DataError(f"{_at(where)} expected an object, got {shown(value)}")
    hints = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in value:
            out[f.name] = check_json(value[f.name], hints[f.name], _child(where, f.name))
        elif f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            raise DataError(f"{_at(where)} no {f.name!r}")
    return out
