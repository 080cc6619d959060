"""What to say about a model request while it runs: time waited, tokens so far, silence."""

from __future__ import annotations

TICK_S = 1.0
"""How often a waiting request's display is refreshed."""
PROGRESS_EVERY_S = 30.0
"""Seconds between progress lines of a long model step (a quarter of a shorter idle timeout)."""
SILENT_AFTER_S = 60.0
"""Seconds without a byte from the server before it is said to be silent (a quarter of a
shorter idle timeout, so the warning always comes well before the request is given up)."""


class RequestWatch:
    """What to say about one model request while it runs: time waited, tokens so far, and
    whether the server has gone silent. Times are ``time.monotonic()`` seconds, passed in so
    the rules can be checked without waiting."""

    def __init__(self, started: float, idle_timeout: float | None = None):
        self.started = self.last = self.reported = started
        self.idle_timeout = idle_timeout
        self.tokens = 0
        self.warned = False
        """The current silence has been reported (reset by the next chunk)."""

    def _limit(self, default: float) -> float:
        return min(default, self.idle_timeout / 4) if self.idle_timeout else default

    def chunk(self, tokens: int, now: float) -> None:
        """The server sent a chunk; ``tokens`` received so far."""
        self.tokens, self.last, self.warned = tokens, now, False

    def status(self) -> str:
        """The spinner's text (the spinner shows the time itself)."""
        if not self.tokens:
            return "waiting for the model (reading the prompt)"
        return f"receiving the reply: {self.tokens} tokens"

    def progress(self, now: float) -> str | None:
        """A progress line when one is due (every :data:`PROGRESS_EVERY_S`), else None."""
        if now - self.reported < self._limit(PROGRESS_EVERY_S):
            return None
        self.reported = now
        waited = now - self.started
        if not self.tokens:
            return f"model step: {waited:.0f} s, no tokens yet (the server is reading the prompt)"
        return f"model step: {waited:.0f} s, {self.tokens} tokens so far"

    def silence(self, now: float) -> str | None:
        """A warning, once per silence, when the server has sent nothing for
        :data:`SILENT_AFTER_S`; else None."""
        quiet = now - self.last
        if self.warned or quiet < self._limit(SILENT_AFTER_S):
            return None
        self.warned = True
        if not self.tokens:
            given_up = (f"; the request is given up after {self.idle_timeout:.0f} s without a "
                        "byte (request_timeout)" if self.idle_timeout else "")
            return (f"no reply from the server after {quiet:.0f} s: a long prompt can take "
                    f"minutes to read, or the server is stuck{given_up}")
        given_up = (f" (the request is given up after {self.idle_timeout:.0f} s of silence: "
                    "request_timeout)" if self.idle_timeout else "")
        return (f"the server has sent nothing for {quiet:.0f} s since its last token; it may "
                f"be stuck{given_up}")

