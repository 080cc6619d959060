"""``python -m agent`` runs the CLI."""

from agent.entry import main

main()
