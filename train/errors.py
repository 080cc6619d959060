"""The trainer's user-facing errors and its exit codes.

Exit codes follow the product's: 2 bad usage (a flag value, a file that is not what the stage
takes), 3 an error with a stated cause (a server that failed, a missing dependency).
"""

from __future__ import annotations

USAGE = 2
CAUSE = 3

TORCH_HINT = "pip install -e '.[train]'"


class TrainError(Exception):
    """A failure the command line prints as one ``error:`` line and exits ``code`` with."""

    def __init__(self, message: str, code: int = CAUSE):
        super().__init__(message)
        self.code = code


class InputError(TrainError):
    """An input file is missing, unreadable or not what the stage takes (exit 2)."""

    def __init__(self, message: str):
        super().__init__(message, USAGE)


def need_torch() -> None:
    """Raise :class:`TrainError` (exit 3) naming the extra to install when torch or
    transformers cannot be imported."""
    missing = []
    for name in ("torch", "transformers"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise TrainError(f"this stage needs {' and '.join(missing)}, which {verb} not "
                         f"installed; run: {TORCH_HINT}")
