"""``tool_protocol = auto``: one small decision, its rules as data."""

from agent.config import load_settings
from agent.events import ProtocolChoice, parse_event
from agent.protocols.choice import AUTO_RULES, CODER_MODELS, Rule, decide


def test_auto_is_text_with_a_json_fallback_whatever_the_template():
    for facts in ({}, {"supports_tools": True}, {"supports_tools": False, "model": "x.gguf"}):
        decision = decide("auto", facts)
        assert (decision.protocol, decision.fallback) == ("text", "json")
        assert "speculation" in decision.reason and "prompt cache" in decision.reason
        assert decision.facts == facts
    assert AUTO_RULES[-1].when == {}  # the default matches always


def test_an_explicit_setting_is_kept_without_fallback():
    for setting in ("text", "json", "native"):
        decision = decide(setting, {"supports_tools": True})
        assert (decision.protocol, decision.fallback) == (setting, None)
        assert setting in decision.reason


def test_measured_rules_go_ahead_of_the_default():
    measured = Rule("native", None, "replay: native decodes 1.4x faster on this model",
                    when={"model": "big.gguf", "supports_tools": True})
    rules = (measured, *AUTO_RULES)
    assert decide("auto", {"model": "big.gguf", "supports_tools": True}, rules).protocol == \
        "native"
    assert decide("auto", {"model": "big.gguf", "supports_tools": False}, rules).protocol == \
        "text"


def test_text_is_a_valid_setting_and_the_default_is_auto(monkeypatch):
    assert load_settings().tool_protocol == "auto"
    monkeypatch.setenv("DFLASH_AGENT_TOOL_PROTOCOL", "text")
    assert load_settings().tool_protocol == "text"


def test_the_protocol_event_round_trips_through_the_log():
    event = ProtocolChoice(session_id="s", protocol="json", previous="text", step=3,
                           reason="2 malformed replies in a row under text")
    assert parse_event(event.model_dump_json()) == event


def test_auto_names_the_coder_measurement_for_qwen2_5_coder():
    for name in CODER_MODELS:
        decision = decide("auto", {"model": name, "supports_tools": True})
        assert (decision.protocol, decision.fallback) == ("whole", None)
        assert "Qwen2.5-Coder-1.5B" in decision.reason and "2026-12-07" in decision.reason
