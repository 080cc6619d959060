"""Checkpoints: snapshots of the user's working tree in private refs, so a task can be undone.

A snapshot is a commit of the whole working tree (tracked files, staged or not, and untracked
files that are not ignored) built through a temporary index file, stored under
``refs/agent/checkpoints/<session>/<task>``. Taking one never changes HEAD, the branch, the real
index, the stash or any file. Restoring rewrites only the files the task changed.

The rooms, bottom to top (each imports only those below it):

- ``plumbing`` — refs, the agent's identity, running git, temporary index files, opening the
  repository (refused mid-merge or mid-rebase).
- ``coverage`` — what a snapshot leaves out on purpose (ignored, large, unreadable files).
- ``tree`` — two snapshots compared path by path, following nested repositories' gitlinks.
- ``snapshots`` — taking a snapshot.
- ``diffs`` — the diff of a task, and the files it changed.
- ``restores`` — the restore plan, its conflict checks, and the writes.
- ``git_state`` — the staged state and the stash entries, kept and put back.
- ``commits`` — committing a task's files.

Each name is imported from the room that defines it.
"""
