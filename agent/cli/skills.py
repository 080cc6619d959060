"""``agent skills``: list, show, new and validate Agent Skills (SKILL.md folders)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from agent.errors import EXIT_TASK_FAILED, UsageError, UserError
from agent.ui import echo
from skills.catalog import shorten
from skills.loader import Discovery, Skill, Source, discover, skill_folders, skill_roots
from skills.scaffold import ScaffoldError, new_skill
from skills.trust import SkillTrustError, is_trusted, trust
from skills.validate import validate

skills_app = typer.Typer(help="Agent Skills: list, show, trust, new, validate.",
                         no_args_is_help=True, rich_markup_mode=None)

RepoOpt = Annotated[Path, typer.Option("--repo", metavar="DIR", help="Repository whose "
                                       ".agents/skills count (default: the current "
                                       "directory).")]


def _roots(repo: Path) -> list[tuple[Source, Path]]:
    return skill_roots(repo.expanduser().resolve())


def _discover(repo: Path) -> Discovery:
    return discover(_roots(repo))


@skills_app.command("list")
def list_cmd(repo: RepoOpt = Path("."),
             json_out: Annotated[bool, typer.Option("--json", help="JSON output.")] = False
             ) -> None:
    """Skills the agent sees here: source (project, user, bundled), name, description,
    problems; then skipped folders and overridden skills."""
    found = _discover(repo)
    if json_out:
        typer.echo(json.dumps({
            "skills": [{"name": s.name, "source": s.source, "description": s.description,
                        "location": str(s.file), "problems": s.warnings,
                        "allowed_tools": s.allowed_tools,
                        "allowed_tools_trusted": is_trusted(s)}
                       for s in found.skills.values()],
            "skipped": [{"folder": str(f), "reason": r} for f, r in found.skipped],
            "warnings": found.warnings}, indent=2))
        return
    if not found.skills:
        echo("no skills found (add one with `agent skills new NAME`)")
    for s in found.skills.values():
        echo(f"{s.source:<8} {s.name:<28} {shorten(s.description, 70)}")
        if note := _untrusted_note(s):
            echo(f"{'':<8} {'':<28} allowed-tools{note}")
        for problem in s.warnings:
            echo(f"{'':<8} {'':<28} problem: {problem}")
    for folder, reason in found.skipped:
        echo(f"skipped  {folder}: {reason}")
    for warning in found.warnings:
        echo(f"warning: {warning}")


@skills_app.command("show")
def show_cmd(name: Annotated[str, typer.Argument(help="Skill name (see `agent skills list`).")],
             repo: RepoOpt = Path(".")) -> None:
    """A skill's fields, location, files and instructions."""
    found = _discover(repo)
    skill = found.skills.get(name)
    if skill is None:
        raise UsageError(f"no skill named '{name}'; installed: "
                         + (", ".join(found.skills) or "none"))
    lines = [f"name: {skill.name}", f"source: {skill.source}", f"location: {skill.file}",
             f"description: {skill.description}"]
    for label, value in (("license", skill.license), ("compatibility", skill.compatibility)):
        if value:
            lines.append(f"{label}: {value}")
    if skill.allowed_tools:
        lines.append("allowed-tools: " + " ".join(skill.allowed_tools) + _untrusted_note(skill))
    lines += [f"metadata: {k}={v}" for k, v in skill.metadata.items()]
    lines += [f"problem: {w}" for w in skill.warnings]
    lines.append("files: " + (", ".join(skill.resources()) or "(none besides SKILL.md)"))
    echo("\n".join(lines) + "\n\n" + skill.body)


def _untrusted_note(skill: Skill) -> str:
    if not skill.allowed_tools or is_trusted(skill):
        return ""
    return f" (not trusted: pre-approves nothing until `agent skills trust {skill.name}`)"


@skills_app.command("trust")
def trust_cmd(name: Annotated[str, typer.Argument(help="A project skill (see `agent skills "
                                                  "list`).")],
              repo: RepoOpt = Path(".")) -> None:
    """Let a repository's own skill pre-approve its allowed-tools: its folder's current
    contents are remembered; any change to them needs trust again."""
    skill = _discover(repo).skills.get(name)
    if skill is None:
        raise UsageError(f"no skill named '{name}'; see `agent skills list`")
    if skill.source != "project":
        echo(f"{name} is a {skill.source} skill: its allowed-tools already count")
        return
    try:
        trust(skill)
    except SkillTrustError as exc:
        raise UsageError(f"cannot trust {name}: {exc}") from None
    allowed = " ".join(skill.allowed_tools) or "(none)"
    echo(f"trusted {skill.folder} as it is now; while {name} is active it pre-approves: "
         f"{allowed}")


@skills_app.command("new")
def new_cmd(name: Annotated[str, typer.Argument(help="Lowercase letters, digits and single "
                                                "hyphens, e.g. release-notes.")],
            description: Annotated[str | None, typer.Option(help="What the skill does and "
                                                            "when to use it.")] = None,
            user: Annotated[bool, typer.Option("--user", help="Create it in ~/.agents/skills "
                                               "instead of the repository.")] = False,
            repo: RepoOpt = Path(".")) -> None:
    """Create a valid skill folder to fill in (<repo>/.agents/skills/NAME by default)."""
    parent = (Path.home() if user else repo.expanduser().resolve()) / ".agents" / "skills"
    try:
        folder = new_skill(name, parent, description)
    except ScaffoldError as exc:
        raise UsageError(str(exc)) from exc
    echo(f"created {folder / 'SKILL.md'}; edit it, then check it with "
         f"`agent skills validate {folder}`")


@skills_app.command("validate")
def validate_cmd(path: Annotated[Path | None, typer.Argument(
                     help="A skill folder, its SKILL.md, or a folder of skills (default: every "
                     "skill folder discovery searches for --repo: project, user, bundled).")
                 ] = None,
                 repo: RepoOpt = Path(".")) -> None:
    """Check skills against the Agent Skills specification (errors as the reference
    validator skills-ref words them). Exit code 1 when a skill is invalid."""
    if path is None:
        # Every folder under the discovery roots, not only the winners of discovery: skipped
        # and overridden skills are the ones a user most needs the errors for.
        labelled = [(source, folder) for source, root in _roots(repo)
                    for folder in skill_folders(root)]
        where = "the skill folders of " + ", ".join(str(r) for _, r in _roots(repo))
    else:
        path = path.expanduser()
        try:
            is_skill = path.is_file() or (path / "SKILL.md").is_file() \
                or (path / "skill.md").is_file()
            folders = [path] if is_skill or not path.is_dir() else skill_folders(path)
        except OSError as exc:  # Python 3.11's is_file raises on EACCES (exit 4 on input)
            raise UserError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
        labelled = [(None, folder) for folder in folders]
        where = str(path)
    if not labelled:
        raise UsageError(f"no SKILL.md in or under {where}")
    invalid = 0
    for source, folder in labelled:
        report = validate(folder)
        invalid += not report.valid
        label = f"{source} " if source else ""
        echo(f"{label}{'valid' if report.valid else 'invalid'}: {report.folder}")
        for error in report.errors:
            echo(f"  error: {error}")
        for warning in report.warnings:
            echo(f"  warning: {warning}")
    if path is None:
        echo(f"{len(labelled)} skills checked, {invalid} invalid")
    if invalid:
        raise typer.Exit(EXIT_TASK_FAILED)
