"""The versioned event model: the session log, ``--json`` output and progress reports are
streams of these events (one JSON object per line)."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

SCHEMA_VERSION = 1


class Timings(BaseModel):
    """llama-server's per-request ``timings`` (docs/design/backend-facts.md, Responses); unknown
    fields are kept."""

    model_config = ConfigDict(extra="allow")
    cache_n: int | None = None
    prompt_n: int | None = None
    prompt_ms: float | None = None
    prompt_per_second: float | None = None
    predicted_n: int | None = None
    predicted_ms: float | None = None
    predicted_per_second: float | None = None
    draft_n: int | None = None
    draft_n_accepted: int | None = None


class _Event(BaseModel):
    v: Literal[1] = SCHEMA_VERSION
    session_id: str
    ts: float = Field(default_factory=time.time, description="Unix time, seconds.")


class SessionStart(_Event):
    type: Literal["session_start"] = "session_start"
    task: str
    workspace: str
    base_url: str
    protocol: str
    preset: str | None = None
    profile: str | None = None
    model: str | None = None
    n_ctx: int | None = None
    repo: str | None = Field(None, description="Git work tree root, when there is one.")
    speculation: str | None = Field(None, description="The tuned launch's draft length and "
                                    "why (backend.serve.tuning), when the profile is tuned.")


class ProtocolChoice(_Event):
    """The tool-call protocol from here on, and why: the session's decision before its first
    request (``step`` 0, with the ``setting`` and the ``facts`` it saw), or a fallback later
    (``previous`` set; only a note was appended, earlier messages are unchanged)."""

    type: Literal["protocol"] = "protocol"
    protocol: str
    reason: str
    setting: str | None = None
    fallback: str | None = Field(None, description="The protocol the session may fall back to.")
    previous: str | None = None
    step: int = 0
    facts: dict[str, Any] = {}


class ToolCallInfo(BaseModel):
    id: str
    name: str
    arguments: Any


class ModelTurn(_Event):
    type: Literal["model_turn"] = "model_turn"
    step: int
    protocol: str
    content: str
    reasoning: str = Field("", description="The reasoning the server streamed apart from the "
                           "content (reasoning_content: a thinking model under --jinja).")
    tool_calls: list[ToolCallInfo] = []
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    timings: Timings | None = None
    draft_n_max: int | None = Field(None, description="The draft length the request carried "
                                    "(speculative.n_max, 0 = no draft); None when it carried "
                                    "none (the server's own length).")
    ended_early: bool = Field(False, description="The agent ended the reply after its last "
                              "complete tool call, as the model went on past it (text "
                              "protocol); content holds what was kept.")
    repeated: bool = Field(False, description="The reply repeats an earlier one of the task "
                           "word for word under greedy decoding: neither run nor kept, the "
                           "step asked again with sampling (agent/repeats.py).")


class ToolCall(_Event):
    type: Literal["tool_call"] = "tool_call"
    step: int
    call_id: str
    name: str
    arguments: Any
    preview: str | None = Field(None, description="For an edit: what it is about to change, "
                                "as a unified diff numbered like the file (None when it "
                                "cannot apply).")


class ToolResult(_Event):
    type: Literal["tool_result"] = "tool_result"
    step: int
    call_id: str
    name: str
    text: str
    is_error: bool
    duration_s: float


class FinalAnswer(_Event):
    type: Literal["final_answer"] = "final_answer"
    text: str
    reason: str = Field(description="done, max_steps, max_time, repeated_call, format_errors, "
                        "length (a reply cut by max_tokens), nothing_done, nothing_changed, "
                        "broken_files, check_failed (a final answer refused again: "
                        "agent/finish.py), "
                        "interrupted or error.")
    steps: int


class Message(_Event):
    """A message appended to the model's history, exactly as sent (``resume`` replays these)."""

    type: Literal["message"] = "message"
    message: dict[str, Any]


class Compaction(_Event):
    """The history was compacted: ``messages`` replaces everything sent before."""

    type: Literal["compaction"] = "compaction"
    messages: list[dict[str, Any]]


class TaskStart(_Event):
    type: Literal["task_start"] = "task_start"
    task: int = Field(description="1-based task number within the session.")
    text: str


class Checkpoint(_Event):
    """A snapshot of the working tree on a private git ref."""

    type: Literal["checkpoint"] = "checkpoint"
    task: int
    kind: Literal["before", "after", "undo", "redo"]
    ref: str
    sha: str


class FileWrite(_Event):
    """A file the session's file tools wrote (create, str_replace, insert, undo_edit) and
    what it held afterwards. Logged, not shown: an undo of a task that has no end checkpoint
    (its run was killed) puts back only files still as the agent left them, and an undo while
    another session ran tells that session's files from this one's."""

    type: Literal["file_write"] = "file_write"
    task: int
    path: str = Field(description="From the repository root, '/'-separated; a byte that is "
                      "not UTF-8 as \\xNN.")
    digest: str | None = Field(description="sha256 of the file's bytes after the write (of a "
                               "symbolic link's target, prefixed 'link:'); None: the call "
                               "removed the file.")


class ProjectPlan(_Event):
    """``new-project``'s plan: the recipe chosen and why, and each plan the model wrote with
    the product's verdict on it (``accepted``, ``rejected`` with the problems sent back to the
    model, ``refused`` when this machine lacks its toolchain). The simple recipe's fixed plan
    is logged too, as attempt 0."""

    type: Literal["project_plan"] = "project_plan"
    recipe: str
    recipe_reason: str = ""
    attempt: int = Field(description="The model's plans count from 1; 0 marks the product's "
                         "own verdicts (the simple recipe's fixed plan, a refusal).")
    status: Literal["accepted", "rejected", "refused"]
    plan: dict[str, Any] | None = None
    problems: list[str] = []
    reply: str = Field("", description="The model's reply, as written (first 4000 characters).")


class ProjectChecked(_Event):
    """``new-project``'s own verdict: the project's tests as the product ran them, and the
    commit it made."""

    type: Literal["project_checked"] = "project_checked"
    tests: str
    detail: str = ""
    commit: str | None = None
    files: list[str] = []
    runner: str = Field("", description="The test command the product ran ('' when none).")
    recipe: str | None = None
    environment: str = Field("", description="How the project's isolated environment was "
                             "made ('' when the product made none).")


class ErrorEvent(_Event):
    type: Literal["error"] = "error"
    message: str
    kind: str


Event = Annotated[SessionStart | Message | Compaction | TaskStart | Checkpoint | ModelTurn
                  | ToolCall | ToolResult | FinalAnswer | ProjectPlan | ProjectChecked | ErrorEvent
                  | ProtocolChoice | FileWrite,
                  Field(discriminator="type")]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(line: str) -> Event:
    """Parse one JSONL line into its event class; raises ``pydantic.ValidationError``."""
    return EVENT_ADAPTER.validate_json(line)


def describe_invalid(exc: ValidationError) -> str:
    """What is wrong with a line that :func:`parse_event` refused, as one plain phrase.

    Pydantic's own text names the union's classes, the error codes and a documentation URL,
    over several lines: noise to someone whose session log is damaged. This says whether the
    line is not JSON, not an event, an unknown or newer event, or which fields are wrong."""
    errors = exc.errors(include_url=False)
    first = errors[0] if errors else {"type": "", "loc": (), "msg": str(exc)}
    kind, ctx = first["type"], first.get("ctx") or {}
    if kind == "json_invalid":
        where = str(ctx.get("error", first["msg"])).replace(" at line 1 column", " at column")
        return f"it is not JSON ({where})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "it is not a JSON object"
    if kind == "union_tag_not_found":
        return 'it has no "type" field'
    if kind == "union_tag_invalid":
        return (f"its type '{ctx.get('tag')}' is not an event type this version knows "
                "(written by a newer version, or not by this product)")
    event = first["loc"][0] if first["loc"] else "event"
    version = [e for e in errors if e["loc"][1:] == ("v",) and e["type"] == "literal_error"]
    if version:
        return (f"it is a {event} event of schema version {version[0]['input']!r} and this "
                f"version reads only {SCHEMA_VERSION} (written by a newer version)")
    missing = [str(e["loc"][-1]) for e in errors if e["type"] == "missing"]
    if missing:
        names = ", ".join(f"'{m}'" for m in missing)
        return f"the {event} event lacks the field{'s' if len(missing) > 1 else ''} {names}"
    field = ".".join(str(part) for part in first["loc"][1:]) or "?"
    return f"the field '{field}' of this {event} event: {first['msg']}"
