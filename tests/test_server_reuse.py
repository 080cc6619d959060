"""Field case 9: the managed server that is up is the one sessions use. ``agent backend up
--parallel 2`` followed by ``agent run`` used to start a second, one-slot server (its plan
differed only in the slot count) and queue sessions while the two-slot server idled."""

from __future__ import annotations

from pathlib import Path

from backend.engine.probe_model import write_probe_model
from backend.engine.registry import Engine, register_system
from backend.models.presets import get_preset
from backend.serve import process, server
from backend.serve.launch import plan_for
from backend.serve.pipeline import LaunchRequest, launch


def _probe_preset(agent_home: Path, tmp_path: Path, engine: Engine) -> Engine:
    model = write_probe_model(tmp_path / "probe.gguf")
    (agent_home / "config").mkdir(parents=True, exist_ok=True)
    (agent_home / "config" / "presets.toml").write_text(
        f'[probe]\nmodel = "{model}"\nprofile = "baseline"\nctx_size = 1024\n')
    return register_system(engine.binary)


def test_a_session_uses_the_server_backend_up_started_with_more_slots(
        engine: Engine, agent_home: Path, tmp_path: Path):
    registered = _probe_preset(agent_home, tmp_path, engine)
    plan = plan_for(get_preset("probe"), registered, parallel=2)
    started, reused = server.up(plan, port=process.pick_port("127.0.0.1", 0), preset="probe")
    assert not reused
    try:
        notes: list[str] = []
        state, reused = launch(LaunchRequest(get_preset("probe"), session=True),
                               note=notes.append)
        assert reused and state.pid == started.pid and state.plan.parallel == 2
        assert [s.pid for s in server.running()] == [started.pid]
    finally:
        server.down(all_servers=True)


def test_a_server_with_another_configuration_is_named_and_left_alone(
        engine: Engine, agent_home: Path, tmp_path: Path):
    registered = _probe_preset(agent_home, tmp_path, engine)
    other = plan_for(get_preset("probe"), registered, ctx_size=512)
    started, _ = server.up(other, port=process.pick_port("127.0.0.1", 0), preset="probe")
    try:
        notes: list[str] = []
        state, reused = launch(LaunchRequest(get_preset("probe"), session=True,
                                             port=process.pick_port("127.0.0.1", 0)),
                               note=notes.append)
        assert not reused and state.pid != started.pid and state.plan.ctx_size == 1024
        assert any(f"at {started.base_url} runs with another ctx_size" in n for n in notes), notes
        assert sorted(s.pid for s in server.running()) == sorted([started.pid, state.pid])
    finally:
        server.down(all_servers=True)


def test_slot_settings_are_the_only_differences_a_session_ignores(tmp_path: Path):
    from backend.serve.profiles import LaunchPlan

    base = LaunchPlan(binary=tmp_path / "s", model=tmp_path / "m", profile="baseline",
                      ctx_size=4096)
    assert server.plan_differences(base, base.model_copy(update={"parallel": 4,
                                                                 "idle_timeout": 60})) == []
    assert server.plan_differences(base, base.model_copy(update={"profile": "ngram",
                                                                 "ctx_size": 8192})) == [
        "profile", "ctx_size"]
