"""Skills for one agent session: discover, build the capped catalog, register ``activate_skill``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from skills.activation import TOOL_NAME, ActivateSkill, Activations
from skills.catalog import CATALOG_SHARE, Catalog, build_catalog, estimate_tokens
from skills.loader import Discovery, discover, skill_roots
from tools.base import ToolContext
from tools.registry import Registry


class UnknownSkill(ValueError):
    """A skill asked for by name (``--skill``) was not found."""


@dataclass
class SessionSkills:
    """What a session got: the catalog for its system prompt and the activation state."""

    discovery: Discovery
    catalog: Catalog
    activations: Activations


def find_skills(repo: Path | None, forced: Sequence[str] = (),
                home: Path | None = None) -> Discovery:
    """Discover the skills for ``repo`` (bundled, user, project).

    Raises :class:`UnknownSkill` when a ``forced`` name (``--skill``) is not among them."""
    found = discover(skill_roots(repo, home))
    missing = [n for n in forced if n not in found.skills]
    if missing:
        raise UnknownSkill(f"no skill named {', '.join(repr(n) for n in missing)}; installed: "
                           + (", ".join(found.skills) or "none")
                           + " (see `agent skills list`)")
    return found


def attach_skills(registry: Registry, ctx: ToolContext, found: Discovery, n_ctx: int,
                  count: Callable[[str], int] = estimate_tokens, forced: Sequence[str] = (),
                  share: float = CATALOG_SHARE) -> SessionSkills | None:
    """Build a catalog of ``found`` skills of at most ``share * n_ctx`` tokens (measured with
    ``count``) and add ``activate_skill`` to ``registry`` (bound to ``ctx``'s workspace, the
    registry's own). ``forced`` names (``--skill``) are activatable even when the catalog had
    no room for them. None when there is no skill to offer."""
    if not found.skills:
        return None
    catalog = build_catalog(list(found.skills.values()), int(n_ctx * share), count)
    names = catalog.names + sorted(n for n in set(forced) if n not in catalog.names)
    if not names:
        return None
    activations = Activations(found.skills, names, ctx, set(registry.tools) | {TOOL_NAME})
    registry.add(ActivateSkill(ctx, activations))
    return SessionSkills(found, catalog, activations)
