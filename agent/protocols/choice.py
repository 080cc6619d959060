"""Which tool-call protocol a session uses, decided once before its first request.

``tool_protocol = auto`` walks :data:`AUTO_RULES` (data, so that measurements such as the
replay benchmark's can add rules ahead of the default) and takes the first whose ``when`` facts
all match. The decision names the one fallback the session may take later; a fallback only
appends a note, so the system prompt and every earlier turn stay byte-identical (prefix cache).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Rule:
    """``protocol`` (and ``fallback``) when every fact in ``when`` equals its value."""

    protocol: str
    fallback: str | None
    reason: str
    when: Mapping[str, Any] = field(default_factory=dict)


EMBEDDED_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
CODER_MODELS = ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
"""The coder presets' files (backend/models/presets.toml)."""

AUTO_RULES: tuple[Rule, ...] = (
    Rule("json", None,
         "measured on the embedded SmolLM2-135M (2026-12-01, the real new-project test): under "
         "the text protocol it answers in prose with a code block and runs to max_tokens "
         "without a call (3,755 characters, no file written); the json grammar forces a "
         "valid call every turn",
         when={"model": EMBEDDED_MODEL}),
    *(Rule("whole", None,
           "measured on Qwen2.5-Coder-1.5B-Instruct Q4_K_M (benchmarks/RESULTS.md, 2026-12-07, "
           "a 2-core CPU): the task benchmark's 11 repository edits, solved 1 under whole and "
           "none under text, json or native, with no false success under whole; the first "
           "command (new-project, 4 descriptions) 3 of 4 under whole against 2 and 1 of 4 "
           "under text. Files are written whole, as the model has seen code in answers; "
           "commands come in bash blocks; no fallback (a malformed reply is told where the "
           "path goes)",
           when={"model": name}) for name in CODER_MODELS),
    Rule("text", "json",
         "text keeps speculation and the prompt cache working inside the agent's turns: "
         "arguments are raw text (a file's content as it is in the file, which n-gram lookup "
         "and drafts predict) and no grammar splits words into non-canonical tokens; json "
         "(grammar-forced) is the fallback after repeated format errors. Forced replay "
         "(benchmarks/RESULTS.md, 2026-12-02, one H200, the agent's 40 turns as a capable "
         "model writes them): the same calls take 9,634 tokens as text and 10,972 as json "
         "(escaping: +14 % to decode), text kept 0.83-0.91 of the prompt cache against "
         "json's 0.80-0.85, and n-gram lookup gains little on either (1.04-1.09 tokens a "
         "step)"),
)
"""First match wins; the last rule matches always."""


@dataclass(frozen=True)
class ProtocolDecision:
    """What a session runs with and why (logged as a ``protocol`` event)."""

    setting: str
    protocol: str
    fallback: str | None
    reason: str
    facts: Mapping[str, Any] = field(default_factory=dict)


def decide(setting: str, facts: Mapping[str, Any],
           rules: tuple[Rule, ...] = AUTO_RULES) -> ProtocolDecision:
    """The decision for the ``tool_protocol`` ``setting`` given ``facts`` about the server
    (e.g. ``supports_tools``, ``model``). An explicit setting is kept, with no fallback."""
    if setting != "auto":
        return ProtocolDecision(setting, setting, None, f"tool_protocol is set to {setting}",
                                dict(facts))
    rule = next(r for r in rules if all(facts.get(k) == v for k, v in r.when.items()))
    return ProtocolDecision(setting, rule.protocol, rule.fallback, rule.reason, dict(facts))
