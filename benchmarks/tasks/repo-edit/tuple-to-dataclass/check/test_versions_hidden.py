import dataclasses

import compare
import pytest
from versions import Version, parse_version


def test_returns_a_version_dataclass():
    v = parse_version("1.4.2")
    assert dataclasses.is_dataclass(v) and isinstance(v, Version)
    assert (v.major, v.minor, v.patch) == (1, 4, 2)
    assert {f.name for f in dataclasses.fields(Version)} == {"major", "minor", "patch"}


def test_missing_parts_are_zero():
    v = parse_version("2.1")
    assert (v.major, v.minor, v.patch) == (2, 1, 0)


def test_bad_version_raises():
    with pytest.raises(ValueError):
        parse_version("1.2.3.4")


def test_callers():
    assert compare.is_newer("1.10.0", "1.9.9")
    assert not compare.is_newer("1.2.3", "1.2.3")
    assert compare.describe("2.0") == "2.0.0 (major 2)"
    assert compare.bump_minor("3.4.5") == "3.5.0"
