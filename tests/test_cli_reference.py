"""docs/cli.md is the ``--help`` of every command, regenerated here and compared."""

from agent.cli.reference import REFERENCE, render


def test_cli_reference_is_up_to_date() -> None:
    """A change to any command's help text must come with ``python -m agent.cli.reference``."""
    assert REFERENCE.read_text(encoding="utf-8") == render(), (
        "docs/cli.md is stale: run python -m agent.cli.reference")


def test_cli_reference_covers_every_command_group() -> None:
    """The walk reaches nested groups (``agent backend cache rm``), not only the top level."""
    text = render()
    for title in ("## `agent new-project`", "## `agent backend up`", "## `agent backend cache rm`",
                  "## `agent mcp serve`", "## `agent skills validate`"):
        assert title in text
