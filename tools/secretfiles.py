"""Files that may hold secrets, by name and place: reading one needs the user's approval like a
command (agent/sessions/approval.py), and grep's walk leaves them out.

Untrusted text the model reads (a README, an issue, a command's output) can carry a prompt
injection asking it to read a key and repeat it; with a remote ``--base-url`` the file's
contents would leave the machine. Names are not secrets: glob and listings still show them.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path, PurePath

from tools.ignore import ignored
from tools.workspace import VCS_FOLDERS, PathRefused, Workspace, display_given

# Sources: the file-name signatures secret scanners use (gitrob's and shhgit's lists: private
# keys and key stores by extension, SSH keys, .netrc, .npmrc, .pypirc, .git-credentials,
# .pgpass, .htpasswd, .env, credentials files) and the read rules Claude Code's settings
# documentation gives as its example of keeping secrets from the model (.env, .env.*,
# secrets/**). GitHub secret scanning and gitleaks match contents, which cannot help here: the
# decision is made before the file is read. Patterns are matched against the lower-cased name
# (macOS and Windows names are case-insensitive) and stay narrow on purpose: key.py,
# secrets_test.py, tokenizer.json and keys/ read freely.
SECRET_NAMES: tuple[tuple[str, str], ...] = (
    (".env", "an environment file: API keys, passwords"),
    (".env.*", "an environment file: API keys, passwords"),
    ("*.env", "an environment file: API keys, passwords"),
    (".envrc", "direnv's file: it exports variables, tokens among them"),
    ("*.pem", "a private key or certificate"),
    ("*.key", "a private key"),
    ("*.p12", "a key store"),
    ("*.pfx", "a key store"),
    ("*.keystore", "a key store"),
    ("*.jks", "a Java key store"),
    ("id_rsa*", "an SSH private key"),
    ("id_dsa*", "an SSH private key"),
    ("id_ecdsa*", "an SSH private key"),
    ("id_ed25519*", "an SSH private key"),
    (".netrc", "login credentials"),
    ("_netrc", "login credentials"),
    (".git-credentials", "git's stored credentials"),
    (".pgpass", "PostgreSQL passwords"),
    (".htpasswd", "password hashes"),
    (".npmrc", "a package registry's token"),
    (".pypirc", "a package registry's token"),
    (".dockercfg", "a container registry's token"),
    ("credentials", "a credentials file"),
    ("credentials.json", "a credentials file"),
    ("secrets.*", "named for secrets"),
    ("secret.*", "named for secrets"),
)
"""(pattern, why) pairs: a file whose lower-cased name matches a pattern may hold secrets."""

TEMPLATE_PARTS = frozenset({"example", "sample", "template", "dist"})
"""A name with one of these among its dot-separated parts is a template to copy
(``.env.example``, ``secrets.sample.yaml``): committed on purpose, with no real values."""

PUBLIC_SUFFIXES = (".pub",)
"""Public halves of key pairs (``id_rsa.pub``): meant to be shared."""

SECRET_FOLDERS = frozenset({"secrets", ".secrets"})
"""A file git ignores inside a folder of one of these names is taken to be a secret kept out
of the repository on purpose (a committed file there is in the history anyway)."""


def secret_name(name: str) -> str | None:
    """Why a file named ``name`` may hold secrets, judged by the name alone, or None."""
    low = name.lower()
    if low.endswith(PUBLIC_SUFFIXES) or not TEMPLATE_PARTS.isdisjoint(low.split(".")):
        return None
    return next((why for pattern, why in SECRET_NAMES if fnmatchcase(low, pattern)), None)


def vcs_folder(workspace: Workspace, full: Path) -> str | None:
    """The version-control folder (``.git`` …, any letter case) that ``full``, a path inside
    one of the workspace's roots, is in or is, or None."""
    try:
        parts = full.relative_to(workspace.root_of(full)).parts
    except (PathRefused, ValueError):
        return None
    return next((part for part in parts if part.lower() in VCS_FOLDERS), None)


def holds_secrets(workspace: Workspace, path: str | Path, edit: bool = False) -> str | None:
    """Why reading ``path`` (as the model gives it, or a real path) may reveal secrets, or
    None: anything in a version-control folder (``.git/config`` holds remote URLs, tokens in
    them included), a file whose name or whose symlink target's name
    :func:`secret_name` flags, or a file git ignores inside a folder named ``secrets``. A path
    the workspace refuses, or one that does not exist, is None: the tool refuses it anyway,
    or there is nothing in it to reveal (creating a new ``.env`` asks nothing). So is an
    ``edit`` in a version-control folder: the file tools never write there, and the model is
    better told that than the user asked about an edit that cannot run."""
    try:
        full = workspace.resolve(path, writable=False)
    except PathRefused:
        return None
    if not full.exists():
        return None  # nothing to reveal: the tool says it does not exist, or creates it
    given = display_given(path) if isinstance(path, str) else workspace.relative(Path(path))
    folder = vcs_folder(workspace, full)
    if folder and edit:
        return None
    if folder:
        where = "is" if full.name == folder else "is in"
        return (f"{given} {where} {folder}/, the repository's own folder, whose configuration "
                "can hold credentials (a token in a remote's URL)")
    if full.is_dir():
        return None  # a listing shows names only; grep's walk skips what a name flags
    why = secret_name(PurePath(str(path)).name) or secret_name(full.name)
    if why:
        return f"{given} may hold secrets ({why})"
    root = workspace.root_of(full)
    secret_folder = next((part for part in full.relative_to(root).parts[:-1]
                          if part.lower() in SECRET_FOLDERS), None)
    if secret_folder and ignored(root, full):
        return f"{given} may hold secrets (git ignores it, in a folder named {secret_folder})"
    return None


def skipped_by_search(workspace: Workspace, path: Path, real: Path) -> bool:
    """Whether a search walking folders leaves out ``path`` (``real``: where it leads, the
    same unless a symlink): its name or its target's may hold secrets, or it is a symlink into
    a version-control folder. A walk started inside ``.git`` reads git's files: its path
    named them, which asked the user."""
    if secret_name(path.name) or secret_name(real.name):
        return True
    return vcs_folder(workspace, real) is not None and vcs_folder(workspace, path) is None
