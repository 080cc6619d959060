"""The agent: CLI, loop, sessions, config, project creation."""
