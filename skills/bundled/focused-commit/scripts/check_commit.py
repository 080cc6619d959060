"""Check a commit before making it: what is staged, what is not, and the message.

Usage: python3 check_commit.py "MESSAGE"   (run inside the git repository)
Prints the staged and unstaged files, then OK or one line per problem.
Exit code: 0 OK, 1 problems, 2 not a git repository.
"""

from __future__ import annotations

import subprocess
import sys

MAX_SUBJECT = 72
VAGUE = {"fix", "fixes", "update", "updates", "changes", "wip", "misc", "stuff", "commit"}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def message_problems(message: str) -> list[str]:
    """What is wrong with a commit message (empty list: nothing)."""
    lines = message.strip().split("\n")
    subject = lines[0].strip() if lines else ""
    problems = []
    if not subject:
        return ["the message is empty"]
    if len(subject) > MAX_SUBJECT:
        problems.append(f"the subject has {len(subject)} characters; keep it to {MAX_SUBJECT}")
    if subject.endswith("."):
        problems.append("the subject ends with a full stop; drop it")
    if subject.lower().strip(" .!") in VAGUE or len(subject.split()) < 2:
        problems.append(f"the subject '{subject}' is vague; say what the change does")
    if len(lines) > 1 and lines[1].strip():
        problems.append("put a blank line between the subject and the body")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        staged = git("diff", "--cached", "--name-only").split()
        unstaged = git("diff", "--name-only").split()
        untracked = git("ls-files", "--others", "--exclude-standard").split()
    except (subprocess.CalledProcessError, FileNotFoundError):
        print("not a git repository (run it inside one)")
        return 2
    print("staged: " + (", ".join(staged) or "(nothing)"))
    print("not staged: " + (", ".join(unstaged + untracked) or "(nothing)"))
    problems = [] if staged else ["nothing is staged; git add the files of this change"]
    if args:
        problems += message_problems(args[0])
    else:
        problems.append('no message given; pass it: check_commit.py "the message"')
    for problem in problems:
        print(f"problem: {problem}")
    if not problems:
        print("OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
