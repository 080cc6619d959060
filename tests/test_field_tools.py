"""Field-trial failures of the tools on input they must handle: each failed before its fix
(internal errors on a NUL byte or a non-UTF-8 file name, indentation mapped on the first line
only, encodings guessed silently, big files skipped by grep)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tools.registry import Registry


@pytest.mark.parametrize(("tool", "args"), [
    ("view", {"path": "a\x00b"}),
    ("create", {"path": "x\x00.py", "file_text": "x"}),
    ("str_replace", {"path": "a\x00", "old_str": "a", "new_str": "b"}),
    ("insert", {"path": "\x00", "insert_line": 0, "text": "x"}),
    ("undo_edit", {"path": "a\x00"}),
    ("grep", {"pattern": "x", "path": "\x00"}),
    ("glob", {"pattern": "*", "path": "src\x00"}),
    ("bash", {"command": "true", "cwd": "\x00"}),
])
def test_a_nul_byte_in_a_path_is_a_clear_tool_error(reg: Registry, tool: str, args: dict):
    obs = reg.call(tool, args)
    assert obs.is_error and "NUL byte" in obs.text, obs.text


@pytest.mark.skipif(os.uname().sysname == "Darwin", reason="APFS refuses non-UTF-8 names")
def test_file_names_that_are_not_utf8_are_listed_escaped(reg: Registry, ws: Path):
    name = os.fsencode(ws) + b"/caf\xe9.txt"
    with open(name, "wb") as fh:
        fh.write(b"hello there\n")
    for tool, args in [("grep", {"pattern": "hello"}), ("glob", {"pattern": "**/*"}),
                       ("view", {"path": "."})]:
        obs = reg.call(tool, args)
        assert not obs.is_error and "caf\\xe9.txt" in obs.text, (tool, obs.text)
        json.dumps(obs.model_dump())  # what failed: pydantic serialisation of surrogates
        obs.model_dump_json()


def test_indentation_flexible_matching_maps_every_line(reg: Registry, ws: Path):
    (ws / "t.py").write_text("def f(x):\n\tif x:\n\t\treturn 1\n\treturn 2\n")
    obs = reg.call("str_replace", {"path": "t.py", "old_str": "    if x:\n        return 1",
                                   "new_str": "    if x:\n        y = 2\n        return y"})
    assert not obs.is_error, obs.text
    assert (ws / "t.py").read_text() == \
        "def f(x):\n\tif x:\n\t\ty = 2\n\t\treturn y\n\treturn 2\n"


def test_a_guessed_encoding_is_said_and_never_written_as_a_guess(reg: Registry, ws: Path):
    (ws / "legacy.txt").write_bytes("caf\xe9 au lait\nprice: 3\n".encode("cp1252"))
    view = reg.call("view", {"path": "legacy.txt"})
    assert "decoded as cp1252" in view.text and "café" in view.text
    euro = reg.call("str_replace", {"path": "legacy.txt", "old_str": "price: 3",
                                    "new_str": "price: 3 €"})
    assert euro.is_error and "cp1252" in euro.text and "€" in euro.text
    assert (ws / "legacy.txt").read_bytes() == "caf\xe9 au lait\nprice: 3\n".encode("cp1252")
    ok = reg.call("str_replace", {"path": "legacy.txt", "old_str": "price: 3",
                                  "new_str": "price: 4 (café)"})
    assert not ok.is_error, ok.text
    assert (ws / "legacy.txt").read_bytes() == \
        "caf\xe9 au lait\nprice: 4 (caf\xe9)\n".encode("cp1252")


def test_grep_searches_files_over_two_mib_too(reg: Registry, ws: Path):
    lines = [f"line {n} filler filler filler filler" for n in range(100_000)]
    lines[77_777] = "the NEEDLE is here"
    (ws / "big.log").write_text("\r\n".join(lines) + "\r\n")
    assert (ws / "big.log").stat().st_size > 2 * 2**20
    for args in ({"pattern": "NEEDLE"}, {"pattern": "NEEDLE is here$", "path": "big.log"}):
        obs = reg.call("grep", args)
        assert obs.text == "big.log:77778: the NEEDLE is here", obs.text
    spilled = reg.call("bash", {"command": "seq 1 400000; echo FINDME"})
    assert "full output is in" in spilled.text
    name = spilled.text.split("full output is in ")[1].split()[0]
    found = reg.call("grep", {"pattern": "FINDME", "path": f".dflash-agent/{name}"})
    assert found.text.endswith(": FINDME"), found.text
