"""The project's own DFlash draft trainer (``python -m train``; train/README.md).

Outside the product: nothing in ``agent``, ``tools``, ``skills``, ``backend`` or ``benchmarks``
imports it. The torch-free stages (prompt rendering, llama-server generation, token-id files,
GGUF export) need only the project's own dependencies; the torch stages need the ``[train]``
extra (``pip install -e '.[train]'``).
"""
