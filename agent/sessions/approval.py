"""Approval modes: what needs the user's confirmation before it runs.

- ``ask``: every bash command and every edit (the edit shown as a diff);
- ``auto-edit``: edits run, bash and MCP tools ask, and so does an edit of a file git reads as
  configuration (``.gitattributes``…: it can name filters that run; the tools' ``sensitive``
  check says which), even when a skill pre-approves the tool;
- ``full-auto``: nothing asks.
Read-only tools (view, grep, glob, bash_jobs, activate_skill) never ask, nor tools an active
skill's ``allowed-tools`` lists, except a read (or an edit: its result shows the lines
around it) of a file that may hold secrets (``.env``, a private key, anything in ``.git/``:
the tools' ``secret`` check says which), which asks in ``ask`` and ``auto-edit`` like a
command, a skill's pre-approval notwithstanding: a prompt injection in anything the model reads
can ask it to read a key and repeat it. With no terminal to ask on, a call that needs approval
stops the task with a message instead of hanging; such a read or edit is refused alone, with a
result saying why, and the task goes on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from agent.approvals import ApprovalUnavailable, Approver, CallRefused
from agent.ui import printable
from tools.create import lines_label
from tools.mcp.tool import SEPARATOR as MCP_SEPARATOR
from tools.workspace import display_given

READ_ONLY = frozenset({"view", "grep", "glob", "bash_jobs", "activate_skill"})
EDITS = frozenset({"create", "str_replace", "insert", "undo_edit"})
SECRET_READS = frozenset({"view", "grep"})
"""Tools that read the file or folder their ``path`` names (glob shows names only)."""
CREATE_HEAD = 20
"""Lines of a new file shown when its ``create`` asks (the rest is counted)."""


def needs_approval(mode: str, tool: str) -> bool:
    """Whether ``tool`` needs confirmation under ``mode`` (unknown tools count as commands)."""
    if mode == "full-auto" or tool in READ_ONLY:
        return False
    if mode == "auto-edit":
        return tool not in EDITS
    return True


def describe(call: dict[str, Any], preview: str | None = None) -> str:
    """What the user is asked to approve: the command, or the edit as a diff (``preview``:
    the tool's own, numbered like the file, see :meth:`tools.registry.Registry.preview`)."""
    args = call["arguments"]
    name = call["name"]
    if name == "bash":
        return f"$ {args.get('command', '')}"
    if name == "create":
        return describe_create(args, preview)
    if name == "view":
        lines = args.get("view_range")
        return f"view {args.get('path')}" + (f" (lines {lines})" if lines else "")
    if name == "grep":
        return f"grep {args.get('pattern')!r} in {args.get('path')}"
    if preview is not None:
        return preview
    if name == "str_replace":
        # No preview: old_str is not (uniquely) in the file, so there are no line numbers to
        # give; the edit will fail with the reason unless the file changes first.
        lines = [f"-{line}" for line in str(args.get("old_str", "")).splitlines()] \
            + [f"+{line}" for line in str(args.get("new_str", "")).splitlines()]
        return (f"edit {args.get('path')} (old_str does not match {args.get('path')} as it "
                "is now, so this edit would fail):\n" + "\n".join(lines))
    if MCP_SEPARATOR in name:
        # MCP tools ask like bash: the user sees every argument the server will receive.
        server = name.split(MCP_SEPARATOR, 1)[0]
        shown = json.dumps(args, ensure_ascii=False, indent=2)
        return f"MCP server '{server}': {name}\n{shown[:4000]}"
    return f"{name} {args}"


def describe_create(args: dict[str, Any], preview: str | None) -> str:
    """A ``create`` to approve. Over a file that exists (``preview``, the tool's diff): the
    diff whole, every line it removes shown, and said to replace the file: an injected model
    must not pass a rewrite off as a new file. A new file (no preview): its first
    :data:`CREATE_HEAD` lines and how many more there are."""
    path, text = args.get("path"), str(args.get("file_text", ""))
    label = lines_label(text)
    if preview == "":
        return f"create {path} ({label}) would leave the existing file as it is (the same content)"
    if preview is not None:
        return f"create {path} ({label}) replaces the existing file:\n{preview}"
    lines = text.splitlines()
    shown = [f"+{line}" for line in lines[:CREATE_HEAD]]
    if len(lines) > CREATE_HEAD:
        shown.append(f"… {len(lines) - CREATE_HEAD} more lines")
    return f"create {path}:\n" + "\n".join(shown)


def make_approver(mode: str, ask: Callable[[str], str] | None = None,
                  interactive: bool | None = None,
                  preapproved: Callable[[dict[str, Any]], bool] | None = None,
                  sensitive: Callable[[str], str | None] | None = None,
                  preview: Callable[[str, Any], str | None] | None = None,
                  secret: Callable[[str, bool], str | None] | None = None
                  ) -> Approver | None:
    """An approver for ``mode`` (None for full-auto). ``ask`` shows a prompt and returns the
    answer (default: ``input``); ``interactive`` defaults to stdin being a terminal;
    ``preapproved`` says whether a call runs without asking anyway (an active skill's
    ``allowed-tools``); ``sensitive`` gives, for an edit's ``path``, why that file needs
    approval like a command (:meth:`tools.workspace.Workspace.git_interpreted`) or None;
    ``preview`` gives an edit's diff from (tool, arguments)
    (:meth:`tools.registry.Registry.preview`); ``secret`` gives, for a read's or (second argument
    True) an edit's ``path``, why that file may hold secrets
    (:func:`tools.secretfiles.holds_secrets`) or None: such a call asks like a command, and with
    no terminal it is refused alone (:class:`CallRefused`)."""
    if mode == "full-auto":
        return None
    prompt = ask or input
    tty = sys.stdin.isatty() if interactive is None else interactive

    def approve(call: dict[str, Any]) -> str | None:
        args = call.get("arguments")
        path = args.get("path") if isinstance(args, dict) else None
        name = call["name"]
        reason = secret_reason = None
        if path and sensitive and name in EDITS:
            reason = sensitive(str(path))
        if path and secret and reason is None and name in SECRET_READS | EDITS:
            # An edit counts too: its result shows the lines around the change.
            reason = secret_reason = secret(str(path), name in EDITS)
        if reason is None and (not needs_approval(mode, name)
                               or (preapproved and preapproved(call))):
            return None
        if not tty and secret_reason:
            # The task can go on without this file; stopping it would lose the rest of the
            # work for a read the model may not even need.
            doing = "reading" if name in SECRET_READS else "editing"
            raise CallRefused(
                f"{name} {display_given(str(path))} was not run: {secret_reason}; {doing} it "
                "needs the user's approval, and none could be asked here (no terminal). Go on "
                "without it; if the task cannot be done without it, say so in your answer")
        if not tty:
            why = f" ({reason})" if reason else ""
            raise ApprovalUnavailable(
                f"{call['name']} needs approval (--approval {mode}){why} but stdin is not a "
                "terminal; rerun in a terminal or with --approval full-auto")
        diff = preview(call["name"], args) if preview is not None else None
        shown = describe(call, diff) + (f"\n[{reason}]" if reason else "")
        # What is approved must be what is seen: an escape sequence in the command or the
        # edit (put there by a prompt injection) could erase or hide part of it.
        answer = prompt(printable(f"{shown}\nAllow {call['name']}? [y/N or a reason] ")).strip()
        if answer.lower() in {"y", "yes"}:
            return None
        return answer or "no"

    return approve
