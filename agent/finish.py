"""Whether a final answer stands: what the running task's tool calls did.

Exit 0 must mean the task was done. With a small coder model (Qwen2.5-Coder-1.5B, issue 49) a
confident summary came after calls that all failed, after no call that worked, after an edit
that left the file unparseable, and after an edit nobody ran: each ended with exit 0 while the
task's tests failed. So a final answer is refused, with the reason, while:

1. no tool call of the task has succeeded (the second time, the task stops: ``nothing_done``);
2. a file the task edited does not parse (:mod:`tools.diagnostics`; the second time the task
   stops: ``broken_files``);
3. it comes in the same reply as calls whose results the model has not seen;
3b. the task has changed no file and run no command (the second time the task stops:
   ``nothing_changed``; the 1.5B viewed the folder twice and said the rename was done; a
   question's answer is still shown, but exit 0 would claim work that did not happen);
4. code was edited and no command ran after the last edit (once per edit);
5. the last reply's calls all failed, or the last command after the last edit failed (once a
   task; if that command still stands failed, the next final answer stops the task:
   ``check_failed``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tools import diagnostics
from tools.registry import Registry
from tools.workspace import PathRefused, display_given

NOTHING_DONE = ("final_answer not taken: no tool call of this task has succeeded, so nothing "
                "was done or checked yet. Do the task with the tools first.")
AFTER_CALLS = ("final_answer not taken: it came in the same reply as calls whose results you "
               "had not seen. Read their results above; call final_answer again if the task "
               "is done.")
AFTER_FAILURES = ("final_answer not taken: {what} failed (see above). Fix what failed and "
                  "check the result; call final_answer again only if the task is done.")
EMPTY_CHECK = ("final_answer not taken: your last check `{command}` ran no test. Run the "
               "project's tests with the runner they are written for (test_*.py files with "
               "plain assert statements: python -m pytest -q). If the project has no tests, "
               "write a short test file for your change (test_NAME.py with plain assert "
               "statements) and run it, then call final_answer.")
UNCHECKED = ("final_answer not taken: you changed {files} and ran nothing since. Run the "
             "tests (or the program) with bash to check the change, then call final_answer.")
UNCHANGED = ("final_answer not taken: this task has changed no file and run no command yet. "
             "If the task asks for a change, make it with the tools and check it.")
BROKEN = ("final_answer not taken: {problems}. Fix the file, then check it.")
NO_TESTS = re.compile(r"^Ran 0 tests in |^collected 0 items\b|\bno tests ran\b|^# tests 0$|"
                      r"^No tests found", re.MULTILINE)
"""What unittest, pytest, node --test and jest print when they ran no test."""
CODE_SUFFIXES = frozenset({".py", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".go", ".rs",
                           ".java", ".c", ".h", ".cc", ".cpp", ".hpp", ".rb", ".php", ".sh",
                           ".kt", ".swift", ".cs", ".scala", ".lua"})
"""Edits of these files need a command run after them before the task is done."""


@dataclass
class Ledger:
    """The running task's calls as far as a final answer cares (reset per task)."""

    registry: Registry
    succeeded: int = 0
    edited: list[str] = field(default_factory=list)
    """Paths the task's successful edits named, as given, in order (no repeats)."""
    ran_since_edit: bool = False
    ran_any: bool = False
    """A command ran in this task (its outcome aside)."""
    check_failed: str | None = None
    check_empty: bool = False
    """The last command's test runner ran no test."""
    """The last command after the last edit, when it failed."""
    reply_failed: bool = False
    """Every call of the last reply that ran calls failed."""
    refused: set[str] = field(default_factory=set)
    """Refusals given (with their key)."""
    edits: int = 0
    """Successful edits in this task."""
    key: str = ""
    """The key of the last refusal :meth:`refusal` returned."""

    def reset(self) -> None:
        """Forget everything (a new task, or after the product's own first calls)."""
        self.succeeded, self.edited, self.ran_since_edit, self.ran_any = 0, [], False, False
        self.check_failed, self.reply_failed, self.refused = None, False, set()
        self.edits, self.key = 0, ""

    def record(self, name: str, arguments: Any, is_error: bool, text: str = "") -> None:
        """One answered tool call of the model's (a denial or a refusal counts as failed);
        ``text`` is its result. A command whose test runner ran no test checked nothing: it
        counts as a failed check (the 1.5B ran ``python -m unittest discover`` in a folder
        without tests, read "OK" and ended with exit 0)."""
        args = arguments if isinstance(arguments, dict) else {}
        self.ran_any = self.ran_any or name == "bash"
        # pytest exits 5 when it collected nothing: still "ran no test", not a failed test.
        empty = name == "bash" and bool(NO_TESTS.search(text))
        is_error = is_error or empty
        self.check_empty = empty
        if is_error:
            if name == "bash" and isinstance(args.get("command"), str):
                self.ran_since_edit, self.check_failed = True, args["command"]
            return
        self.succeeded += 1
        tool = self.registry.tools.get(name)
        path = args.get("path")
        if tool is not None and tool.mutates and isinstance(path, str):
            self.edits += 1
            if path not in self.edited:
                self.edited.append(path)
            self.ran_since_edit, self.check_failed = False, None
        elif name == "bash" and not args.get("background"):
            # A job started in the background has not run yet: no check.
            self.ran_since_edit, self.check_failed = True, None

    def reply_ended(self, ran: int, failed: int) -> None:
        """A reply's calls have run: ``ran`` of them, ``failed`` with an error."""
        if ran:
            self.reply_failed = failed == ran

    def refusal(self) -> tuple[str, str | None]:
        """Why a final answer is not taken now and, when refusing it again would only repeat
        itself, the stop reason to end the task with instead; ``("", None)`` when it stands."""
        self.key = ""
        if self.succeeded == 0:
            return NOTHING_DONE, "nothing_done"
        problems = self._problems()
        if problems:
            return BROKEN.format(problems="; ".join(problems)), "broken_files"
        if not self.edited and not self.ran_any:
            return UNCHANGED, "nothing_changed"
        code = [p for p in self.edited if _suffix(p) in CODE_SUFFIXES]
        if code and not self.ran_since_edit:
            # Once per edit: a later unchecked edit is asked about again.
            return self._once(UNCHECKED.format(files=", ".join(map(display_given, code))),
                              key=f"#{self.edits}")
        if self.check_failed is not None:
            command = self.check_failed.strip()[:80]
            text = EMPTY_CHECK.format(command=command) if self.check_empty else \
                AFTER_FAILURES.format(what=f"your last check `{command}`")
            return text, "check_failed"
        if self.reply_failed:
            return self._once(AFTER_FAILURES.format(what="every call of your last reply"))
        return "", None

    def _once(self, text: str, key: str = "") -> tuple[str, str | None]:
        """``text`` unless it was given already (for the same ``key``); the loop adds what it
        gives to :attr:`refused` (with :attr:`key`)."""
        self.key = key
        return ("", None) if text + key in self.refused else (text, None)

    def _problems(self) -> list[str]:
        workspace = _workspace(self.registry)
        if workspace is None:
            return []
        found = []
        for path in self.edited:
            try:
                full = workspace.resolve(path, writable=False)
            except PathRefused:
                continue
            problem = diagnostics.problem(full) if full.is_file() else None
            if problem:
                found.append(f"{display_given(path)} does not parse ({problem})")
        return found


def _suffix(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""


def _workspace(registry: Registry):
    """The workspace the registry's file tools work in (None: a registry without them)."""
    view = registry.tools.get("view")
    ctx = getattr(view, "ctx", None)
    return getattr(ctx, "workspace", None)


STOPPED_BEFORE_REPLY = {
    "max_steps": "the task stopped at the step limit",
    "max_time": "the task stopped at the time limit",
    "repeated_call": "the task stopped on repeated calls",
    "approval_needed": "the task stopped: a call needed approval",
    "interrupted": "the user interrupted the task",
    "format_errors": "the task stopped after malformed replies",
    "nothing_done": "the task stopped: no tool call of it succeeded",
    "nothing_changed": "the task stopped: it changed no file and ran no command",
    "broken_files": "the task stopped: a file it edited does not parse",
    "check_failed": "the task stopped: its last check failed",
}
"""Why the last task ended on a tool result, per stop reason, for the bridge's text."""
STOPS = {"nothing_done": "no tool call of it succeeded: nothing was done",
         "nothing_changed": "it changed no file and ran no command (if it was a question, "
                            "the answer is above)",
         "broken_files": "a file it edited does not parse",
         "check_failed": "its last check failed"}
"""What the stop line says after "the model ended the task, but", per ledger stop."""
