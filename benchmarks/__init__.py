"""The maintained measuring tools, importable as ``benchmarks.<name>`` and runnable as
``python -m benchmarks.<name>`` from the repository root.

Beside the product, not part of it: the replay of the agent's own turns (:mod:`.agent_turns`,
with forced replies in :mod:`.forced` and the fixture sessions of :mod:`.agent_sessions`), the
task runner (:mod:`.tasks`) and the single-question scripts (grammar cost, prefix cache, draft
cap, engine and RPC side by side, BeeLlama tool calls, shaped targets, the replayed tuning
choice). Layering: ``train`` may import this package; this package imports the product
(``agent``, ``tools``, ``skills``, ``backend``) and never ``train``; nothing of the product
imports it (tests/test_layering.py). The records of past runs are data, not code, under
``runs/`` (each with its manifest); ``RESULTS.md`` tells what they found.
"""
