"""Prompt sets for ``agent backend bench``: the seed's three coding prompts, an edit-heavy set
whose answers copy most of the prompt, or the user's own file.

A prompts file is either JSON — a list of strings, a list of ``{"name", "text"}`` objects, or
``{"prompts": [...]}`` holding either — or plain text with prompts separated by lines holding
only ``---``. JSON is chosen by the ``.json`` suffix.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from backend.errors import StatedError


class PromptsError(StatedError, ValueError):
    """A prompts file is missing, unreadable, malformed or empty; the message says which."""

    plain = True


class BenchPrompt(BaseModel):
    """One benchmark prompt, sent as a single user message."""

    name: str = Field(min_length=1, description="Short label for tables and charts.")
    text: str = Field(min_length=1, description="The user message.")


# Verbatim from the seed's test_llm_prompts.sh (the user's write-up, section 6).
SEED_PROMPTS: tuple[BenchPrompt, ...] = (
    BenchPrompt(name="task-store", text=(
        "Write a complete Python task store module. Include a Task dataclass, TaskStatus enum, "
        "TaskStore class, add_task, update_task, delete_task, search_tasks, filter_by_status, "
        "export_to_json, get_all_tasks, and 5 tests. Return only one complete Python file.")),
    BenchPrompt(name="kv-report", text=(
        "Write a complete Python key-value report module. Include a KeyValueStore class, set, "
        "get, delete, exists, list_keys, filter_by_prefix, export_to_json, load_from_json, and "
        "a generate_report function that returns total keys, empty values, prefix counts, and "
        "largest value length. Include 5 tests. Return only one complete Python file.")),
    BenchPrompt(name="linked-list", text=(
        "Write a complete Python doubly linked list module. Include a Node dataclass, "
        "DoublyLinkedList class, append, prepend, delete, find, reverse, to_list, from_list, "
        "clear, and 5 tests. Return only one complete Python file.")),
)

# The file the edit prompts hand back with one rename: ordinary code, cut at function
# boundaries into three sizes so the copied answer is about 200, 450 and 900 tokens.
_EDIT_BLOCKS: tuple[str, ...] = (
    '''"""A small inventory: items with a name, a quantity and a unit price."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass
class Item:
    name: str
    quantity: int
    unit_price: float


def total_value(items: list[Item]) -> float:
    total = 0.0
    for item in items:
        total += item.quantity * item.unit_price
    return total
''',
    '''

def find_item(items: list[Item], name: str) -> Item | None:
    for item in items:
        if item.name == name:
            return item
    return None


def restock(items: list[Item], name: str, amount: int) -> Item:
    item = find_item(items, name)
    if item is None:
        item = Item(name=name, quantity=0, unit_price=0.0)
        items.append(item)
    item.quantity += amount
    return item
''',
    '''

def low_stock(items: list[Item], threshold: int = 5) -> list[Item]:
    result = []
    for item in items:
        if item.quantity < threshold:
            result.append(item)
    return result


def to_json(items: list[Item]) -> str:
    return json.dumps([asdict(item) for item in items], indent=2)
''',
    '''

def from_json(text: str) -> list[Item]:
    items = []
    for raw in json.loads(text):
        item = Item(name=raw["name"], quantity=int(raw["quantity"]),
                    unit_price=float(raw["unit_price"]))
        items.append(item)
    return items


def remove_item(items: list[Item], name: str) -> bool:
    item = find_item(items, name)
    if item is None:
        return False
    items.remove(item)
    return True


def most_valuable(items: list[Item]) -> Item | None:
    best = None
    for item in items:
        if best is None or item.quantity * item.unit_price > best.quantity * best.unit_price:
            best = item
    return best
''',
    '''

def report(items: list[Item]) -> str:
    lines = [f"{len(items)} items, total value {total_value(items):.2f}"]
    for item in sorted(items, key=lambda item: item.name):
        flag = " (low)" if item.quantity < 5 else ""
        lines.append(f"- {item.name}: {item.quantity} x {item.unit_price:.2f}{flag}")
    return "\\n".join(lines)


def test_total_value_sums_every_item():
    items = [Item("bolt", 10, 0.5), Item("nut", 4, 0.25)]
    assert total_value(items) == 6.0


def test_restock_adds_a_missing_item():
    items: list[Item] = []
    item = restock(items, "washer", 3)
    assert item.quantity == 3 and items == [item]


def test_json_round_trip_keeps_every_field():
    items = [Item("bolt", 10, 0.5)]
    assert from_json(to_json(items)) == items
''',
)

# Instruction after the file: SmolLM2-135M then copies the code instead of describing it.
_EDIT_ASK = ("Here is a Python file:\n```python\n{source}```\nRepeat the file exactly, but "
             "rename `item` to `entry`. Reply with the code only.")

EDIT_PROMPTS: tuple[BenchPrompt, ...] = tuple(
    BenchPrompt(name=f"rename-{size}", text=_EDIT_ASK.format(source="".join(_EDIT_BLOCKS[:n])))
    for size, n in (("small", 1), ("medium", 3), ("large", 5)))

BUILT_IN: dict[str, tuple[BenchPrompt, ...]] = {"seed": SEED_PROMPTS, "edit": EDIT_PROMPTS}


def _from_json(path: Path, text: str) -> list[BenchPrompt]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PromptsError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: "
                           f"{exc.msg})") from exc
    if isinstance(data, dict) and "prompts" in data:
        data = data["prompts"]
    if not isinstance(data, list):
        raise PromptsError(f"{path}: expected a list of prompts or {{\"prompts\": [...]}}, got "
                           f"{type(data).__name__}")
    prompts = []
    for i, entry in enumerate(data, 1):
        if isinstance(entry, str):
            entry = {"name": f"{path.stem}-{i}", "text": entry}
        elif isinstance(entry, dict):
            entry = {"name": f"{path.stem}-{i}", **entry}
        else:
            raise PromptsError(f"{path}: prompt {i} must be a string or an object with "
                               f"\"text\", got {type(entry).__name__}")
        try:
            prompts.append(BenchPrompt.model_validate(entry))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "prompt"
            raise PromptsError(f"{path}: prompt {i}: {where}: {first['msg']}") from exc
    return prompts


def _from_text(path: Path, text: str) -> list[BenchPrompt]:
    chunks, current = [], []
    for line in text.splitlines():
        if line.strip() == "---":
            chunks.append("\n".join(current))
            current = []
        else:
            current.append(line)
    chunks.append("\n".join(current))
    return [BenchPrompt(name=f"{path.stem}-{i}", text=chunk.strip())
            for i, chunk in enumerate((c for c in chunks if c.strip()), 1)]


def load_prompts(spec: str) -> tuple[str, list[BenchPrompt]]:
    """(label, prompts) for ``spec``: ``seed``, ``edit`` or the path of a prompts file.

    Raises :class:`PromptsError` when the file is missing, unreadable, not UTF-8, malformed,
    or holds no prompt, or when two prompts share a name.
    """
    if spec in BUILT_IN:
        return spec, list(BUILT_IN[spec])
    path = Path(spec).expanduser()
    if not path.is_file():
        raise PromptsError(f"prompts '{spec}': no such file (use seed, edit or the path of a "
                           "JSON or text prompts file)")
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptsError(f"{path}: cannot read the prompts file ({exc})") from exc
    prompts = _from_json(path, text) if path.suffix.lower() == ".json" else _from_text(path, text)
    if not prompts:
        raise PromptsError(f"{path}: holds no prompt")
    names = [p.name for p in prompts]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PromptsError(f"{path}: prompt names must be unique ({', '.join(duplicates)})")
    return str(path), prompts
