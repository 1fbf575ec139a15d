"""The configuration dataclasses and their validators."""

from __future__ import annotations

import pytest

from minirl.config import parse_ints
from minirl.errors import ConfigError


def test_parse_ints() -> None:
    assert parse_ints("1-4,8,2", "t") == [1, 2, 3, 4, 8]
    with pytest.raises(ConfigError, match="expected integers"):
        parse_ints("a-b", "t")
    with pytest.raises(ConfigError, match=">= 1"):
        parse_ints("0,1", "k")
