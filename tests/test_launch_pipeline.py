"""Every launch goes down the one pipeline (backend/serve/pipeline.py): each entry point that
starts a server is called with the pipeline's first step replaced by a spy that records the
request and stops there, so a copy of the launch sequence elsewhere fails these tests."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.models.presets import get_preset
from backend.serve import pipeline
from backend.serve.pipeline import LaunchRequest


class Reached(Exception):
    """Raised by the spy: the entry point reached the pipeline."""


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> list[LaunchRequest]:
    """The requests that reached :func:`pipeline.resolve` (each stops there)."""
    seen: list[LaunchRequest] = []

    def spy(request: LaunchRequest, **_kw: object) -> pipeline.Resolved:
        seen.append(request)
        raise Reached

    monkeypatch.setattr(pipeline, "resolve", spy)
    return seen


def _fake_engine(tmp_path: Path) -> SimpleNamespace:
    return SimpleNamespace(binary=tmp_path / "bin" / "llama-server", key="fake", rpc_server=None)


def test_backend_up_launches_through_the_pipeline(requests: list[LaunchRequest]) -> None:
    from typer.testing import CliRunner

    from agent.cli import main

    result = CliRunner().invoke(main.app, [
        "backend", "up", "--preset", "smollm2-135m", "--parallel", "2", "--idle-timeout", "30",
        "--force", "--rpc", "h:1", "--ctx-size", "2048"])
    assert isinstance(result.exception, Reached), result.output
    [request] = requests
    assert request.preset.name == "smollm2-135m" and request.parallel == 2
    assert request.idle_timeout == 30 and request.force and request.rpc == ("h:1",)
    assert request.ctx_size == 2048 and not request.session


def test_print_cmd_is_the_pipeline_s_print_action(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from agent.cli import main

    seen: list[tuple] = []

    def preview(*args: object) -> None:
        seen.append(args)
        raise Reached

    monkeypatch.setattr(pipeline, "preview_command", preview)
    result = CliRunner().invoke(main.app, ["backend", "up", "--preset", "smollm2-135m",
                                           "--print-cmd", "--parallel", "3"])
    assert isinstance(result.exception, Reached), result.output
    [args] = seen
    assert args[0].name == "smollm2-135m" and args[6] == 3  # the request's preset and slots


def test_the_agent_s_connect_launches_through_the_pipeline(
        requests: list[LaunchRequest]) -> None:
    from agent import runtime
    from agent.config import load_settings
    from agent.ui import Reporter

    with pytest.raises(Reached):
        runtime.connect(load_settings(cli={"preset": "smollm2-135m", "ctx_size": 4096}),
                        Reporter())
    [request] = requests
    assert request.session and request.ctx_size == 4096


def test_bench_resolves_through_the_pipeline(requests: list[LaunchRequest],
                                             tmp_path: Path) -> None:
    from backend.measure.bench import run_bench
    from backend.measure.prompts import SEED_PROMPTS

    with pytest.raises(Reached):
        run_bench(get_preset("smollm2-135m"), _fake_engine(tmp_path),  # type: ignore[arg-type]
                  ["baseline"], list(SEED_PROMPTS), prompt_set="seed", temperatures=[0.0])
    assert [r.profile for r in requests] == ["baseline"]


def test_calibrate_resolves_through_the_pipeline(requests: list[LaunchRequest],
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    from backend.measure import calibrate as cal_mod

    monkeypatch.setattr(cal_mod, "binary_facts", lambda _b: SimpleNamespace(has=lambda _f: True))
    with pytest.raises(Reached):
        cal_mod.calibrate(get_preset("smollm2-135m-dflash"),
                          _fake_engine(tmp_path), force=True)  # type: ignore[arg-type]
    [request] = requests
    assert request.profile == "dflash-fixed" and request.force


def test_the_agent_turn_replay_resolves_through_the_pipeline(
        requests: list[LaunchRequest], tmp_path: Path) -> None:
    turns = importlib.import_module("benchmarks.agent_turns")
    with pytest.raises(Reached):
        turns.run(get_preset("smollm2-135m"), _fake_engine(tmp_path), ["baseline"], ["json"],
                  [], None, max_tokens=16, sampling={"temperature": 0.0})
    [request] = requests
    assert request.profile == "baseline" and request.temperature == 0.0


def test_the_benchmark_scripts_launch_through_the_pipeline(
        requests: list[LaunchRequest], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    grammar = importlib.import_module("benchmarks.grammar_cost")
    with pytest.raises(Reached):
        grammar.measure("smollm2-135m", "baseline", 16, 1, tmp_path)
    prefix = importlib.import_module("benchmarks.prefix_cache")
    monkeypatch.setattr(sys, "argv", ["prefix_cache.py"])
    with pytest.raises(Reached):
        prefix.main()
    assert [(r.profile, r.ctx_size) for r in requests] == [("baseline", None),
                                                            ("baseline", 16384)]


def test_a_launch_walks_resolve_reuse_or_tune_fit_start_in_order(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    steps: list[str] = []
    plan = SimpleNamespace(name="plan")
    request = LaunchRequest(get_preset("smollm2-135m"))
    monkeypatch.setattr(pipeline, "resolve", lambda r, **_k: steps.append("resolve") or
                        pipeline.Resolved(r, _fake_engine(tmp_path), plan))  # type: ignore[arg-type]
    monkeypatch.setattr(pipeline, "reuse_or_tune", lambda resolved, _note: steps.append(
        "reuse or tune") or pipeline.Choice(resolved.plan, "line"))
    monkeypatch.setattr(pipeline, "fit", lambda p, r, _note: steps.append("fit"))
    monkeypatch.setattr(pipeline, "start", lambda p, r, _note, line: steps.append(
        f"start {p.name} {line}") or ("state", False))
    assert pipeline.launch(request) == ("state", False)
    assert steps == ["resolve", "reuse or tune", "fit", "start plan line"]
