"""The replay benchmark's fixture sessions (``*.json`` here) and :mod:`.make_sessions`, which
records them with the agent's real tools; :mod:`train.agent_sessions` records synthetic ones
through the same ``play()``."""
