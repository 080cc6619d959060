"""Review of BeeLlama <= 0.3 tuning (tune() no longer skips bee-old): a profile the bee-old
launch refuses is not probed first. Uses the real v0.3.1 binary (``beellama`` marker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.engine.registry import Engine
from backend.serve.profiles import LaunchPlan, server_argv
from backend.serve.speculation.store import load_observations
from backend.serve.tuning import tune
from tests.conftest import home_env

pytestmark = [pytest.mark.beellama]


def test_dflash_plus_ngram_on_bee_old_is_not_probed_before_its_launch_is_refused(
        bee_old: Engine, bee_home: Path, tiny_dflash: dict[str, Path]):
    """server_argv refuses dflash+ngram on bee-old; tune() must not first launch a probe server
    (minutes for a large target) nor record its outcome against the draft."""
    plan = LaunchPlan(binary=bee_old.binary, model=tiny_dflash["target"],
                      profile="dflash+ngram", ctx_size=2048, draft=tiny_dflash["old"])
    notes: list[str] = []
    with home_env(bee_home):
        tuned, choice = tune(plan, note=notes.append)
        seen = load_observations(plan.model_copy(update={"profile": "dflash-fixed"}))
    assert (tuned, choice) == (plan, None), (choice, notes)
    assert not seen and not any("prob" in n for n in notes), notes
    with pytest.raises(ValueError, match="not proven on BeeLlama"):
        server_argv(tuned, "127.0.0.1", 8080, "bee-old")
