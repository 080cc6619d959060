"""The documentation a clone has: what code cites exists, links resolve, the README stays short
and its test command is the one CI runs."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("agent", "backend", "tools", "skills", "train", "benchmarks")
CITED = re.compile(r"\bdocs/[\w./-]+?\.md\b")
FOREIGN = ROOT / "backend" / "engine" / "facts"
"""Stored facts about BeeLlama's own tree: the ``docs/`` paths there are that fork's."""
LINK = re.compile(r"\]\(([^)\s]+)\)")
OLD_NAMES = re.compile(r"BACKEND-FACTS|FIELD-CASES|SPECULATION-COSTS|MCP-FACTS|\bDESIGN\.md|"
                       r"\bSTYLE\.md")


def product_sources() -> list[Path]:
    """The maintained sources of the product packages (run folders under benchmarks/ are
    records of a past run and keep what they said then; :data:`FOREIGN` describes another
    repository)."""
    files = []
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*"):
            if path.suffix not in {".py", ".md", ".toml"} or not path.is_file():
                continue
            if package == "benchmarks" and path.parent != ROOT / "benchmarks":
                continue
            if path.is_relative_to(FOREIGN):
                continue
            files.append(path)
    return files


def markdown_files() -> list[Path]:
    """The README, the changelog and every page under docs/."""
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_docs_page_cited_in_product_code_exists() -> None:
    """A citation such as ``docs/design/field-cases.md, class 6`` must resolve in a clone."""
    missing = {f"{path.relative_to(ROOT)}: {cited}"
               for path in product_sources()
               for cited in CITED.findall(path.read_text(encoding="utf-8", errors="replace"))
               if not (ROOT / cited).is_file()}
    assert not missing, sorted(missing)


def test_product_code_cites_no_design_file_outside_the_repository() -> None:
    """The design notes the code once cited by bare name live in docs/design/ now."""
    found = [f"{path.relative_to(ROOT)}: {match.group(0)}"
             for path in product_sources()
             for match in OLD_NAMES.finditer(path.read_text(encoding="utf-8", errors="replace"))
             if path.name != "RESULTS.md"]
    assert not found, found


def test_relative_links_in_the_docs_resolve() -> None:
    """Every relative link of the README, the changelog and docs/ names a file or folder that
    exists (anchors are not checked)."""
    broken = []
    for page in markdown_files():
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_readme_is_short() -> None:
    """The README is the front door; the rest is in docs/."""
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def test_readme_test_command_is_what_ci_runs() -> None:
    """``.ci/run`` runs the README's test command verbatim, so the README never promises a
    command CI does not run."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```sh\n(.*?)\n```", readme, re.S)
    test_command = next(block for block in blocks if "pytest" in block)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci.splitlines()


def test_readme_first_command_creates_a_project() -> None:
    """The first command installs the package and runs ``agent new-project``."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.findall(r"```sh\n(.*?)\n```", readme, re.S)[0]
    assert first.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install . ")
    assert 'agent new-project "a CLI todo app with tests"' in first


RUNS = ROOT / "benchmarks" / "runs"
"""The archive of past runs, apart from the maintained tools of ``benchmarks/``."""
RUN_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*-\d{4}-\d{2}-\d{2}(?:-[a-z0-9]+)*")


def test_performance_rows_point_at_runs_that_exist() -> None:
    """Each run folder docs/performance.md names is in benchmarks/runs/."""
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    folders = set(re.findall(r"benchmarks/runs/([\w.-]+)/", text))
    assert folders
    assert not [name for name in folders if not (RUNS / name).is_dir()]


def test_every_cited_run_folder_is_in_the_archive() -> None:
    """A path ``benchmarks/<run>/`` in the documents or the code names a folder that moved
    under benchmarks/runs/ (or never existed)."""
    sources = [*markdown_files(), ROOT / "benchmarks" / "RESULTS.md", *product_sources(),
               ROOT / "train" / "h200.sh", *sorted((ROOT / "tests").glob("*.py"))]
    found = [f"{path.relative_to(ROOT)}: {match.group(0)}" for path in sources
             for match in re.finditer(r"\bbenchmarks/([\w.-]+)", path.read_text("utf-8"))
             if RUN_NAME.fullmatch(match.group(1))]
    assert found == []


def test_every_run_has_a_manifest_that_lists_its_files() -> None:
    """Each run folder says what it was (commit, machine, commands) and holds what its
    manifest lists; no dated run folder is left beside the tools."""
    runs = sorted(p for p in RUNS.iterdir() if p.is_dir())
    assert runs
    assert not [p.name for p in (ROOT / "benchmarks").iterdir() if RUN_NAME.fullmatch(p.name)]
    for run in runs:
        manifest = tomllib.loads((run / "manifest.toml").read_text("utf-8"))
        assert manifest["run"] == run.name
        for key in ("commit", "machine", "commands"):
            assert manifest[key], f"{run.name}: {key}"
        held = sorted(str(p.relative_to(run)) for p in run.rglob("*")
                      if p.is_file() and p.name != "manifest.toml" and "__pycache__" not in p.parts)
        assert manifest["files"] == held, run.name


def test_product_code_cites_nothing_of_the_workspace_around_the_repository() -> None:
    """``shared/`` (the seed, engine sources, design notes) is not in a clone: what the code
    depends on is in docs/design/."""
    outside = re.compile(r"\bshared/(?:design|engines|seed|dflash)\b")
    found = [f"{path.relative_to(ROOT)}: {match.group(0)}"
             for package in ("agent", "backend", "tools", "skills")
             for path in (ROOT / package).rglob("*")
             if path.suffix in {".py", ".md", ".toml"} and path.is_file()
             for match in outside.finditer(path.read_text(encoding="utf-8", errors="replace"))]
    assert not found, found
