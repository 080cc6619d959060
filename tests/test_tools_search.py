"""The search tools (grep, glob) driven through the registry over real file trees with real
``.gitignore`` files (root and nested)."""

import subprocess
from pathlib import Path

import pytest

from tools.registry import Registry, default_registry
from tools.workspace import Workspace


def write(root: Path, files: dict[str, str | bytes]) -> None:
    """Create ``files`` (relative path → text or bytes) under ``root``."""
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


@pytest.fixture
def tree(ws: Path) -> Path:
    """A small project: ignored build output, a nested ignore file, a binary, a .git folder."""
    write(ws, {
        ".gitignore": "build/\n*.pyc\n",
        ".git/config": "needle = in git config\n",
        "main.py": "import os\nneedle = 1\n",
        "README.md": "The needle is documented.\n",
        "src/app.py": "def f():\n    return 'needle'\n",
        "src/app.pyc": "needle compiled\n",
        "src/settings.toml": "needle = true\n",
        "src/sub/conf.toml": "needle = false\n",
        "src/sub/deep.py": "# no match here\n",
        "build/gen.py": "needle = 'generated'\n",
        "logs/.gitignore": "*.log\n!keep.md\n",
        "logs/run.log": "needle in a log\n",
        "logs/keep.md": "needle kept\n",
        "other/src/x.toml": "needle = 0\n",
        "blob.bin": b"needle\x00\x01\x02",
    })
    return ws


# --- grep -----------------------------------------------------------------------------------


def test_grep_prints_path_line_and_text_for_each_match(reg: Registry, tree: Path):
    obs = reg.call("grep", {"pattern": "needle"})
    assert not obs.is_error
    assert obs.text.split("\n") == [
        "README.md:1: The needle is documented.",
        "logs/keep.md:1: needle kept",
        "main.py:2: needle = 1",
        "other/src/x.toml:1: needle = 0",
        "src/app.py:2:     return 'needle'",
        "src/settings.toml:1: needle = true",
        "src/sub/conf.toml:1: needle = false",
    ]


def test_grep_respects_the_root_gitignore(reg: Registry, tree: Path):
    obs = reg.call("grep", {"pattern": "generated|compiled"})
    assert obs.text == "no matches"


def test_grep_respects_a_nested_gitignore(reg: Registry, tree: Path):
    assert reg.call("grep", {"pattern": "in a log"}).text == "no matches"
    assert reg.call("grep", {"pattern": "in a log", "path": "logs"}).text == "no matches"


def test_a_nested_gitignore_applies_only_below_its_folder(reg: Registry, ws: Path):
    write(ws, {"sub/.gitignore": "*.log\n", "sub/a.log": "hit\n", "top.log": "hit\n",
               "other/b.log": "hit\n"})
    assert reg.call("grep", {"pattern": "hit"}).text.split("\n") == ["other/b.log:1: hit",
                                                                     "top.log:1: hit"]


def test_a_nested_gitignore_can_re_include_a_file_the_root_ignores(reg: Registry, ws: Path):
    write(ws, {".gitignore": "*.log\n", "logs/.gitignore": "!important.log\n",
               "logs/important.log": "hit\n", "logs/noise.log": "hit\n", "top.log": "hit\n"})
    assert reg.call("grep", {"pattern": "hit"}).text == "logs/important.log:1: hit"


def test_the_repositorys_exclude_file_and_the_global_one_are_honoured_like_git(
        reg: Registry, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Files a user leaves out in .git/info/exclude or the global excludes file (local
    notes, an editor's files) were listed and searched: only .gitignore files counted.
    Now git's order holds: .gitignore files above both, the global file last."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-gitconfig"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    write(tmp_path, {"xdg/git/ignore": "*.swp\nkept.txt\n"})
    write(ws, {".git/info/exclude": "local-notes.txt\nscratch/\n",
               ".gitignore": "!kept.txt\n",
               "app.py": "needle\n", "local-notes.txt": "needle\n", "scratch/a.py": "needle\n",
               "app.py.swp": "needle\n", "kept.txt": "needle\n",
               "sub/local-notes.txt": "needle\n"})
    assert reg.call("glob", {"pattern": "**/*"}).text.splitlines() == [
        ".gitignore", "app.py", "kept.txt"]
    assert reg.call("grep", {"pattern": "needle"}).text.splitlines() == [
        "app.py:1: needle", "kept.txt:1: needle"]
    assert reg.call("view", {"path": "."}).text.splitlines() == [".gitignore", "app.py",
                                                                  "kept.txt", "sub/"]
    # A file named directly is still read.
    assert reg.call("view", {"path": "local-notes.txt"}).text == "     1\tneedle"


def test_a_bad_line_in_an_ignore_file_is_skipped_as_git_skips_it(
        reg: Registry, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """'[z-a]', '!' or a lone backslash in .git/info/exclude, the global excludes file or a
    .gitignore raised out of glob, grep and listings (re.error, pathspec's own error); in
    the global file, in every repository. git skips such a line."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-gitconfig"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    write(tmp_path, {"xdg/git/ignore": "[z-a]\n*.swp\n"})
    write(ws, {".git/info/exclude": "!\n\\\nlocal.txt\n", ".gitignore": "[z-a]\n*.log\n",
               "app.py": "needle\n", "local.txt": "needle\n", "a.swp": "needle\n",
               "run.log": "needle\n"})
    assert reg.call("glob", {"pattern": "*"}).text.splitlines() == [".gitignore", "app.py"]
    assert reg.call("grep", {"pattern": "needle"}).text == "app.py:1: needle"
    assert reg.call("view", {"path": "."}).text.splitlines() == [".gitignore", "app.py"]


def test_a_git_file_that_is_no_path_or_a_worktrees_is_read_as_git_reads_it(
        reg: Registry, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A .git file whose gitdir held a NUL made every walk raise (ValueError); a linked
    worktree's info/exclude is the main repository's (git's commondir), and it was not
    honoured there."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-gitconfig"))
    write(ws, {".git": b"gitdir: /tmp/a\x00b\n", "app.py": "x\n"})
    assert reg.call("glob", {"pattern": "*"}).text.splitlines() == ["app.py"]
    main = tmp_path / "main"
    subprocess.run(["git", "init", "-q", str(main)], check=True)
    subprocess.run(["git", "-C", str(main), "-c", "user.email=a@b", "-c", "user.name=a",
                    "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    (main / ".git" / "info").mkdir(exist_ok=True)
    (main / ".git" / "info" / "exclude").write_text("notes.md\n")
    worktree = tmp_path / "wt"
    subprocess.run(["git", "-C", str(main), "worktree", "add", "-q", str(worktree)],
                   check=True)
    write(worktree, {"keep.txt": "x\n", "notes.md": "x\n"})
    listed = default_registry(Workspace(worktree)).call("glob", {"pattern": "*"}).text
    assert listed.splitlines() == ["keep.txt"]


def test_outside_a_git_repository_no_excludes_file_applies(
        reg: Registry, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "no-gitconfig"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    write(tmp_path, {"xdg/git/ignore": "*.swp\n"})
    write(ws, {"app.py.swp": "needle\n"})
    assert reg.call("glob", {"pattern": "*"}).text == "app.py.swp"


def test_a_gitignore_that_is_a_fifo_or_a_huge_link_never_blocks_a_search(reg: Registry,
                                                                          ws: Path):
    """A cloned repository controls its .gitignore files: one linking to /proc/kcore (a
    'regular' file of terabytes) would be read whole, a FIFO swapped in after the check would
    block. A FIFO is passed over, and a file is read no further than a real one could be."""
    import os

    from tools import ignore

    write(ws, {"a.txt": "hit\n", "sub/b.txt": "hit\n"})
    (ws / "big").write_text("*.txt\n" + "#" * (ignore.MAX_GITIGNORE_BYTES * 2))
    (ws / ".gitignore").symlink_to(ws / "big")
    os.mkfifo(ws / "sub" / ".gitignore")
    # The root .gitignore's first line still applies: read, but only as far as the cap.
    assert reg.call("grep", {"pattern": "hit"}).text == "no matches"


def test_grep_never_searches_the_git_folder(reg: Registry, tree: Path):
    assert reg.call("grep", {"pattern": "in git config"}).text == "no matches"


def test_grep_skips_binary_files(reg: Registry, tree: Path):
    obs = reg.call("grep", {"pattern": "needle"})
    assert "blob.bin" not in obs.text


def test_grep_of_a_binary_file_named_directly_finds_nothing(reg: Registry, tree: Path):
    assert reg.call("grep", {"pattern": "needle", "path": "blob.bin"}).text == "no matches"


def test_grep_reports_an_invalid_regex(reg: Registry, tree: Path):
    obs = reg.call("grep", {"pattern": "needle("})
    assert obs.is_error
    assert obs.text.startswith("invalid regular expression 'needle(': missing ), "
                               "unterminated subpattern")


def test_grep_glob_filters_by_file_name(reg: Registry, tree: Path):
    obs = reg.call("grep", {"pattern": "needle", "glob": "*.toml"})
    assert obs.text.split("\n") == ["other/src/x.toml:1: needle = 0",
                                    "src/settings.toml:1: needle = true",
                                    "src/sub/conf.toml:1: needle = false"]


def test_grep_glob_double_star_spans_folders_as_glob_does(reg: Registry, tree: Path):
    """grep's glob filter went to Path.match, whose '**' is one folder before Python 3.13:
    'src/**/*.toml' missed src/settings.toml and '**/*.toml' missed nothing only by chance.
    '**' now spans any number of folders, none too, as the glob tool's does; a pattern still
    matches from the right (src/ at any depth)."""
    def found(glob: str) -> list[str]:
        text = reg.call("grep", {"pattern": "needle", "glob": glob}).text
        return [line.split(":")[0] for line in text.split("\n")]

    assert found("src/**/*.toml") == ["other/src/x.toml", "src/settings.toml",
                                      "src/sub/conf.toml"]
    assert found("src/**/conf.toml") == ["src/sub/conf.toml"]
    assert found("**/*.py") == ["main.py", "src/app.py"]
    assert found("**") == found("*")
    assert found("src/sub/**") == ["src/sub/conf.toml"]
    assert reg.call("grep", {"pattern": "needle", "glob": "lib/**/*.toml"}).text == "no matches"


def test_grep_glob_takes_files_not_folders_that_match_and_may_start_at_the_root(
        reg: Registry, ws: Path):
    """With '**', grep's filter took every file in a folder the pattern matched ('**/*.py'
    searched lib.py/readme.txt, '**/tests' all of tests/); a pattern starting with '/'
    matched nothing (the glob tool takes it from the root)."""
    write(ws, {"lib.py/readme.txt": "needle\n", "tests/t.txt": "needle\n", "a.py": "needle\n",
               "src/x.toml": "needle\n", "other/src/y.toml": "needle\n"})

    def found(glob: str) -> list[str]:
        text = reg.call("grep", {"pattern": "needle", "glob": glob}).text
        return [] if text == "no matches" else [line.split(":")[0] for line in text.split("\n")]

    assert found("**/*.py") == found("*.py") == ["a.py"]
    assert found("**/tests") == []
    assert found("tests/") == ["tests/t.txt"]
    assert found("/src/**/*.toml") == found("/src/*.toml") == ["src/x.toml"]
    assert found("src/**/*.toml") == ["other/src/y.toml", "src/x.toml"]


def test_grep_glob_takes_a_name_as_the_tools_show_it(reg: Registry, ws: Path):
    """grep's glob filter went to Path.match as typed: 'relat\\xf3rio.txt', copied from
    glob's own listing, filtered out the very file it names. Each name as glob lists it now
    filters to that file alone ('\\\\' one literal backslash, '\\x0a' a newline), and is
    a glob pattern for that file alone too (glob read 'x\\y.py' as 'xy.py')."""
    import os

    write(ws, {os.fsdecode(name): "needle\n" for name in (
        b"relat\xf3rio.txt", b"relat\\xf3rio.txt", b"a.py\nb", b"a.py", b"x\\y.py")})
    listed = reg.call("glob", {"pattern": "*"}).text.split("\n")
    assert listed == ["a.py", "a.py\\x0ab", "relat\\\\xf3rio.txt", "relat\\xf3rio.txt",
                      "x\\y.py"]
    for name in listed:
        obs = reg.call("grep", {"pattern": "needle", "glob": name})
        assert obs.text == f"{name}:1: needle", (name, obs.text)
        assert reg.call("glob", {"pattern": name}).text == name
    obs = reg.call("grep", {"pattern": "needle", "glob": "*\\xf3*"})
    assert obs.text == "relat\\xf3rio.txt:1: needle"
    # A backslash before what a glob escapes still escapes it.
    write(ws, {"q*r": "", "qxr": ""})
    assert reg.call("glob", {"pattern": "q\\*r"}).text == "q*r"


def test_a_name_holding_glob_characters_copied_from_a_listing_finds_its_file(
        reg: Registry, ws: Path):
    """'a[1].py', as glob lists it, named only 'a1.py' as a pattern: the file listed could not
    be found by its own name, by glob or by grep's filter."""
    write(ws, {"a[1].py": "needle\n", "a1.py": "needle\n", "what?.md": "needle\n",
               "sub/b[2].txt": "needle\n", "sub/deep/b[2].txt": "needle\n"})
    assert reg.call("glob", {"pattern": "a[1].py"}).text.splitlines() == ["a1.py", "a[1].py"]
    assert reg.call("glob", {"pattern": "what?.md"}).text == "what?.md"
    assert reg.call("glob", {"pattern": "b[2].txt"}).text.splitlines() == [
        "sub/b[2].txt", "sub/deep/b[2].txt"]
    assert reg.call("glob", {"pattern": "sub/b[2].txt"}).text == "sub/b[2].txt"
    grep = reg.call("grep", {"pattern": "needle", "glob": "b[2].txt"}).text.splitlines()
    assert grep == ["sub/b[2].txt:1: needle", "sub/deep/b[2].txt:1: needle"]
    assert reg.call("grep", {"pattern": "needle", "glob": "deep/b[2].txt"}).text == \
        "sub/deep/b[2].txt:1: needle"


def test_glob_patterns_match_a_name_in_either_unicode_form(reg: Registry, ws: Path):
    """A name written decomposed (NFD, as macOS writes names) was not matched by a pattern
    typed composed (NFC), by glob or by grep's glob filter, nor the other way round."""
    import unicodedata

    nfd = unicodedata.normalize("NFD", "maçã.py")
    write(ws, {nfd: "needle\n", "ação.txt": "needle\n", "plain.py": "needle\n"})
    for pattern, found in [("*maçã*", nfd), ("maçã.py", nfd), ("*ção.txt", "ação.txt"),
                           ("ma?ã.py", nfd)]:
        for typed in (pattern, unicodedata.normalize("NFD", pattern)):
            assert reg.call("glob", {"pattern": typed}).text == found, typed
            assert reg.call("grep", {"pattern": "needle", "glob": typed}).text == \
                f"{found}:1: needle", typed


@pytest.mark.parametrize(("tool", "args", "error"), [
    ("glob", {"pattern": "[z-a]"}, "invalid glob pattern '[z-a]': bad character range z-a"),
    ("glob", {"pattern": "!"}, "invalid glob pattern '!': Invalid git pattern: '!'"),
    ("glob", {"pattern": "a\ud800"}, "invalid glob pattern: 'a\\ud800' holds a lone surrogate"),
    ("grep", {"pattern": "x", "glob": "."}, "invalid glob '.': empty pattern"),
    ("grep", {"pattern": "x", "glob": "a\ud800"}, "invalid glob 'a\\ud800': 'a\\ud800' holds"),
])
def test_a_glob_that_is_no_pattern_is_a_clear_error(reg: Registry, ws: Path, tool: str,
                                                    args: dict, error: str):
    """glob '[z-a]' or '!' was an internal error (re.error, pathspec's own), as was
    grep's glob '.' (ValueError from Path.match)."""
    obs = reg.call(tool, args)
    assert obs.is_error and obs.text.startswith(error), obs.text


def test_grep_path_limits_the_search_to_a_folder(reg: Registry, tree: Path):
    obs = reg.call("grep", {"pattern": "needle", "path": "src/sub"})
    assert obs.text == "src/sub/conf.toml:1: needle = false"


def test_grep_path_can_name_a_single_file(reg: Registry, tree: Path):
    obs = reg.call("grep", {"pattern": "needle", "path": "main.py"})
    assert obs.text == "main.py:2: needle = 1"


def test_grep_is_case_sensitive_by_default(reg: Registry, ws: Path):
    write(ws, {"a.txt": "Needle\nneedle\nNEEDLE\n"})
    assert reg.call("grep", {"pattern": "needle"}).text == "a.txt:2: needle"


def test_grep_ignore_case_matches_any_case(reg: Registry, ws: Path):
    write(ws, {"a.txt": "Needle\nneedle\nNEEDLE\nhay\n"})
    obs = reg.call("grep", {"pattern": "needle", "ignore_case": True})
    assert obs.text.split("\n") == ["a.txt:1: Needle", "a.txt:2: needle", "a.txt:3: NEEDLE"]


def test_grep_stops_at_200_matches_with_a_message(reg: Registry, ws: Path):
    write(ws, {"many.txt": "".join(f"hit {n}\n" for n in range(1, 301))})
    lines = reg.call("grep", {"pattern": "hit"}).text.split("\n")
    assert len(lines) == 201
    assert lines[0] == "many.txt:1: hit 1"
    assert lines[199] == "many.txt:200: hit 200"
    assert lines[200] == "[stopped at 200 matches; narrow the pattern or the path]"


def test_grep_with_exactly_200_matches_shows_them_all_without_a_cap_message(
        reg: Registry, ws: Path):
    write(ws, {"many.txt": "hit\n" * 200})
    lines = reg.call("grep", {"pattern": "hit"}).text.split("\n")
    assert len(lines) == 200
    assert lines[199] == "many.txt:200: hit"


def test_grep_clips_long_lines(reg: Registry, ws: Path):
    write(ws, {"min.js": "needle" + "x" * 1000 + "\n"})
    obs = reg.call("grep", {"pattern": "needle"})
    assert obs.text == "min.js:1: needle" + "x" * 294


def test_grep_anchored_pattern_matches_the_first_line_of_a_bom_file(reg: Registry, ws: Path):
    write(ws, {"bom.py": b"\xef\xbb\xbfimport os\nimport sys\n"})
    obs = reg.call("grep", {"pattern": "^import"})
    assert obs.text.split("\n") == ["bom.py:1: import os", "bom.py:2: import sys"]


def test_grep_finds_non_ascii_text_in_a_cp1252_file(reg: Registry, ws: Path):
    write(ws, {"legacy.txt": b"menu = 'caf\xe9'\n"})
    assert reg.call("grep", {"pattern": "caf\u00e9"}).text == "legacy.txt:1: menu = 'caf\u00e9'"


def test_grep_counts_lines_of_a_crlf_file_correctly(reg: Registry, ws: Path):
    write(ws, {"win.txt": b"a\r\nb\r\nneedle\r\n"})
    assert reg.call("grep", {"pattern": "needle$"}).text == "win.txt:3: needle"


def test_grep_line_numbers_agree_with_view_when_a_file_has_form_feeds(reg: Registry, ws: Path):
    write(ws, {"old.c": "int a;\n\x0c\nint needle;\n"})
    assert reg.call("grep", {"pattern": "needle"}).text == "old.c:3: int needle;"
    assert reg.call("view", {"path": "old.c", "view_range": [3, 3]}).text == "     3\tint needle;"


def test_grep_matches_across_unicode_normalization_forms(reg: Registry, ws: Path):
    """A pattern typed composed ("ação", NFC) found nothing in text saved decomposed ("a" +
    U+0303, NFD, as macOS editors write it), nor the other way round. The line is reported as
    it is in the file, and a search for the combining mark itself still finds it."""
    import unicodedata

    composed, decomposed = "ação", unicodedata.normalize("NFD", "ação")
    write(ws, {"nfd.txt": f"x = '{decomposed}'\n", "nfc.txt": f"y = '{composed}'\n"})
    for pattern in (composed, decomposed, "AÇÃO"):
        obs = reg.call("grep", {"pattern": pattern, "ignore_case": pattern == "AÇÃO"})
        assert obs.text.split("\n") == [f"nfc.txt:1: y = '{composed}'",
                                        f"nfd.txt:1: x = '{decomposed}'"], pattern
    obs = reg.call("grep", {"pattern": "\u0303"})
    assert obs.text == f"nfd.txt:1: x = '{decomposed}'"


def test_grep_takes_a_pattern_that_is_no_pattern_once_composed_as_written(reg: Registry,
                                                                          ws: Path):
    """"[ē\u0301-\u0302]" (ē or two combining marks) composes to "[ḗ-\u0302]", a range in the
    wrong order: still searched as written, no error."""
    write(ws, {"a.txt": "\u0302\n"})
    assert reg.call("grep", {"pattern": "[ē\u0301-\u0302]"}).text == "a.txt:1: \u0302"


def test_grep_of_a_missing_path_is_an_error(reg: Registry):
    obs = reg.call("grep", {"pattern": "x", "path": "nope"})
    assert obs.is_error
    assert obs.text == "nope does not exist"


def test_grep_refuses_a_path_outside_the_workspace(reg: Registry, ws: Path):
    obs = reg.call("grep", {"pattern": "root", "path": "/etc"})
    assert obs.is_error
    assert obs.text.startswith(f"/etc is outside the workspace {ws}")


def test_grep_does_not_follow_a_symlinked_folder_out_of_the_workspace(
        reg: Registry, ws: Path, tmp_path: Path):
    write(tmp_path / "outside", {"secret.txt": "needle outside\n"})
    (ws / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    write(ws, {"inside.txt": "needle inside\n"})
    assert reg.call("grep", {"pattern": "needle"}).text == \
        "inside.txt:1: needle inside\nlink/ -> outside the workspace, skipped"


def test_search_over_a_folder_names_the_symlinks_it_skips(reg: Registry, ws: Path,
                                                          tmp_path: Path):
    """Issue 28 item 9: grep over '.' and glob '**/*' dropped a symlinked folder leading
    outside without a word; one that .gitignore names stays unmentioned."""
    write(tmp_path / "outside", {"a.py": "needle = 1\n"})
    (ws / "link_dir").symlink_to(tmp_path / "outside", target_is_directory=True)
    (ws / "ignored_dir").symlink_to(tmp_path / "outside", target_is_directory=True)
    (ws / "link.py").symlink_to(tmp_path / "outside" / "a.py")
    write(ws, {".gitignore": "ignored_dir\n", "main.py": "needle = 2\n"})
    assert reg.call("grep", {"pattern": "needle", "path": "."}).text.splitlines() == [
        "link.py -> outside the workspace, skipped",
        "link_dir/ -> outside the workspace, skipped", "main.py:1: needle = 2"]
    assert reg.call("glob", {"pattern": "**/*"}).text.splitlines() == [
        ".gitignore", "link.py -> outside the workspace, skipped",
        "link_dir/ -> outside the workspace, skipped", "main.py"]
    (ws / "loop").symlink_to("loop")
    assert "loop -> a symlink loop, skipped" in reg.call("view", {"path": "."}).text
    # A file link the name filter leaves out is not mentioned; a folder link may hold matches.
    assert reg.call("glob", {"pattern": "*.toml"}).text.splitlines() == [
        "link_dir/ -> outside the workspace, skipped", "no files match"]


def test_grep_without_a_pattern_names_the_field(reg: Registry):
    obs = reg.call("grep", {"path": "."})
    assert obs.is_error
    assert obs.text == "invalid arguments for grep: pattern: Field required"


# --- glob -----------------------------------------------------------------------------------


def test_glob_double_star_finds_top_level_and_nested_files(reg: Registry, tree: Path):
    obs = reg.call("glob", {"pattern": "**/*.py"})
    assert not obs.is_error
    assert obs.text.split("\n") == ["main.py", "src/app.py", "src/sub/deep.py"]


def test_glob_without_a_slash_matches_at_any_depth(reg: Registry, tree: Path):
    obs = reg.call("glob", {"pattern": "*.toml"})
    assert obs.text.split("\n") == ["other/src/x.toml", "src/settings.toml",
                                    "src/sub/conf.toml"]


def test_glob_respects_root_and_nested_gitignore(reg: Registry, tree: Path):
    assert reg.call("glob", {"pattern": "build/**"}).text == "no files match"
    assert reg.call("glob", {"pattern": "**/*.pyc"}).text == "no files match"
    assert reg.call("glob", {"pattern": "logs/*"}).text.split("\n") == ["logs/.gitignore",
                                                                        "logs/keep.md"]


def test_glob_folder_pattern_is_anchored_and_does_not_cross_folders(reg: Registry, tree: Path):
    obs = reg.call("glob", {"pattern": "src/*.toml"})
    assert obs.text == "src/settings.toml"


def test_glob_accepts_a_leading_dot_slash(reg: Registry, tree: Path):
    assert reg.call("glob", {"pattern": "./src/*.toml"}).text == "src/settings.toml"


def test_glob_path_makes_the_pattern_relative_to_that_folder(reg: Registry, tree: Path):
    obs = reg.call("glob", {"pattern": "*.toml", "path": "src/sub"})
    assert obs.text == "src/sub/conf.toml"


def test_glob_without_matches_says_so(reg: Registry, tree: Path):
    obs = reg.call("glob", {"pattern": "**/*.rs"})
    assert not obs.is_error
    assert obs.text == "no files match"


def test_glob_never_lists_the_git_folder(reg: Registry, tree: Path):
    assert reg.call("glob", {"pattern": "**/config"}).text == "no files match"


def test_glob_stops_at_500_files_with_a_message(reg: Registry, ws: Path):
    write(ws, {f"many/f{n:04}.txt": "" for n in range(600)})
    lines = reg.call("glob", {"pattern": "*.txt"}).text.split("\n")
    assert len(lines) == 501
    assert lines[0] == "many/f0000.txt"
    assert lines[499] == "many/f0499.txt"
    assert lines[500] == "[stopped at 500 files; narrow the pattern]"


def test_glob_with_exactly_500_files_lists_them_all_without_a_cap_message(
        reg: Registry, ws: Path):
    write(ws, {f"many/f{n:04}.txt": "" for n in range(500)})
    lines = reg.call("glob", {"pattern": "*.txt"}).text.split("\n")
    assert len(lines) == 500
    assert lines[-1] == "many/f0499.txt"


def test_glob_pattern_takes_a_name_as_the_tools_show_it(reg: Registry, ws: Path):
    """A name shown with a '\\xf3' escape (not UTF-8) matches its file as a glob pattern; a
    doubled backslash is one literal backslash, as in glob syntax."""
    import os

    for name in (b"relat\xf3rio.txt", b"relat\\xf3rio.txt"):
        with open(os.fsencode(ws) + b"/" + name, "wb") as fh:
            fh.write(b"x\n")
    assert reg.call("glob", {"pattern": "relat\\xf3rio.txt"}).text == "relat\\xf3rio.txt"
    assert reg.call("glob", {"pattern": "*\\xf3*"}).text == "relat\\xf3rio.txt"
    assert reg.call("glob", {"pattern": "relat\\\\xf3rio.txt"}).text == "relat\\\\xf3rio.txt"


def test_glob_matches_names_with_control_characters_by_their_shown_form(reg: Registry,
                                                                        ws: Path):
    """'\\x0a' in a pattern is a newline, as the tools show one in a name. A pattern that
    ends in one matches (pathspec strips a pattern's trailing whitespace), and 'a.py' no
    longer takes the file 'a.py' + newline too (its '$' matched before a final newline)."""
    import os

    for name in (b"a.py", b"a.py\n", b"b\tc.py", "d\u2028e.py".encode()):
        with open(os.fsencode(ws) + b"/" + name, "wb") as fh:
            fh.write(b"x\n")
    assert reg.call("glob", {"pattern": "a.py"}).text == "a.py"
    assert reg.call("glob", {"pattern": "a.py\\x0a"}).text == "a.py\\x0a"
    assert reg.call("glob", {"pattern": "*\\x0a"}).text == "a.py\\x0a"
    assert reg.call("glob", {"pattern": "b\\x09*"}).text == "b\\x09c.py"
    assert reg.call("glob", {"pattern": "b?c.py"}).text == "b\\x09c.py"
    assert reg.call("glob", {"pattern": "d\\xe2\\x80\\xa8e.py"}).text == "d\\xe2\\x80\\xa8e.py"


def test_glob_path_must_be_a_directory(reg: Registry, tree: Path):
    obs = reg.call("glob", {"pattern": "*", "path": "main.py"})
    assert obs.is_error
    assert obs.text == "main.py is not a directory"


def test_glob_refuses_a_path_outside_the_workspace(reg: Registry, ws: Path):
    obs = reg.call("glob", {"pattern": "*", "path": ".."})
    assert obs.is_error
    assert obs.text.startswith(f".. is outside the workspace {ws}")
