"""Writes the replay benchmark's fixture sessions (``benchmarks/agent_sessions/*.json``).

Each session is a coding task over real files, played turn by turn with the agent's own tools
(``tools.registry.default_registry``) in a temporary workspace: every tool result in the JSON
is what the tool really returned (``view`` with its line numbers, ``str_replace``'s snippet,
``pytest``'s output through ``bash``), with the temporary path replaced by the session's
``workspace``. The assistant side of each turn is neutral (tool name and arguments), so
:mod:`benchmarks.agent_turns` can render it in every protocol; ``ask`` is the same step said in
plain words, for the plain-text reference request.

Run from the repository root: ``python -m benchmarks.agent_sessions.make_sessions [NAME ...]
[--all]`` (or ``python benchmarks/agent_sessions/make_sessions.py``). With no names it records
only the sessions that have no JSON file yet: recording again is not byte-stable (pytest's
run times, object addresses and temporary folders), so a recorded session changes only when it
is named. It checks that every test run fails or passes
where the session says it does, and that every ``str_replace`` matched the file's exact text.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.registry import default_registry
from tools.workspace import Workspace

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
TEST_COMMAND = "python -m pytest -q"


@dataclass
class Step:
    """One assistant turn: its kind, one tool call, the plain-words ask; ``fails`` for test
    runs (True: the run must fail, False: it must pass)."""

    kind: str
    tool: str
    arguments: dict[str, Any]
    ask: str
    fails: bool | None = None


@dataclass
class SessionSpec:
    name: str
    description: str
    task: str
    files: dict[str, str]
    steps: list[Step] = field(default_factory=list)


def _lines_of(text: str, marker: str, before: int = 0, after: int = 8) -> list[int]:
    """[first, last] line numbers around the line holding ``marker`` (1-based)."""
    number = next(i for i, line in enumerate(text.splitlines(), 1) if marker in line)
    return [max(1, number - before), number + after]


# --- session 1: a new reporting module for an inventory package --------------------------

INV_INIT = '''"""Inventory tracking: items, stock levels and reports."""

from inventory.core import Inventory, Item

__all__ = ["Inventory", "Item"]
'''

INV_CORE = '''"""Items in stock: a name, a category, a quantity and a unit price."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Item:
    """One stock line."""

    name: str
    category: str
    quantity: int
    unit_price: float
    reorder_level: int = 5

    @property
    def value(self) -> float:
        """What the units in stock are worth."""
        return self.quantity * self.unit_price


@dataclass
class Inventory:
    """Items by name."""

    items: dict[str, Item] = field(default_factory=dict)

    def add(self, item: Item) -> None:
        if item.name in self.items:
            raise ValueError(f"{item.name} is already in the inventory")
        if item.quantity < 0:
            raise ValueError("quantity must not be negative")
        self.items[item.name] = item

    def remove(self, name: str) -> Item:
        try:
            return self.items.pop(name)
        except KeyError:
            raise KeyError(f"no item named {name}") from None

    def find(self, name: str) -> Item | None:
        return self.items.get(name)

    def restock(self, name: str, amount: int) -> Item:
        if amount <= 0:
            raise ValueError("amount must be positive")
        item = self.items[name]
        item.quantity += amount
        return item

    def sell(self, name: str, amount: int) -> Item:
        item = self.items[name]
        if amount > item.quantity:
            raise ValueError(f"only {item.quantity} of {name} in stock")
        item.quantity -= amount
        return item

    def total_value(self) -> float:
        total = 0.0
        for item in self.items.values():
            total += item.value
        return total

    def categories(self) -> list[str]:
        return sorted({item.category for item in self.items.values()})
'''

INV_TEST_CORE = '''import pytest

from inventory import Inventory, Item


def make() -> Inventory:
    inv = Inventory()
    inv.add(Item("bolt", "hardware", 120, 0.05))
    inv.add(Item("drill", "tools", 3, 49.9, reorder_level=2))
    return inv


def test_total_value():
    assert make().total_value() == pytest.approx(120 * 0.05 + 3 * 49.9)


def test_add_twice_fails():
    inv = make()
    with pytest.raises(ValueError):
        inv.add(Item("bolt", "hardware", 1, 0.05))


def test_sell_and_restock():
    inv = make()
    inv.sell("drill", 2)
    assert inv.find("drill").quantity == 1
    inv.restock("drill", 4)
    assert inv.find("drill").quantity == 5


def test_categories():
    assert make().categories() == ["hardware", "tools"]
'''

INV_REPORT_BUG = "if item.quantity < item.reorder_level]"
INV_REPORT_FIX = "if item.quantity <= item.reorder_level]"

INV_REPORT = '''"""Reports over an inventory: low stock, value per category, a text table,
CSV export and import, reorder suggestions and the changes between two snapshots."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from inventory.core import Inventory, Item

CSV_FIELDS = ("name", "category", "quantity", "unit_price", "reorder_level")


@dataclass(frozen=True)
class CategoryRow:
    """Totals for one category."""

    category: str
    items: int
    units: int
    value: float


@dataclass(frozen=True)
class Change:
    """How one item's quantity changed between two snapshots."""

    name: str
    before: int
    after: int

    @property
    def delta(self) -> int:
        return self.after - self.before


def low_stock(inventory: Inventory) -> list[Item]:
    """Items at or below their reorder level, fewest units first."""
    found = [item for item in inventory.items.values() ''' + INV_REPORT_BUG + '''
    return sorted(found, key=lambda item: (item.quantity, item.name))


def value_by_category(inventory: Inventory) -> dict[str, float]:
    """Stock value per category, categories in alphabetical order."""
    totals: dict[str, float] = {}
    for item in inventory.items.values():
        totals[item.category] = totals.get(item.category, 0.0) + item.value
    return {name: round(totals[name], 2) for name in sorted(totals)}


def category_summary(inventory: Inventory) -> list[CategoryRow]:
    """One row per category: how many items and units, and what they are worth."""
    rows = []
    for category in inventory.categories():
        members = [i for i in inventory.items.values() if i.category == category]
        rows.append(CategoryRow(
            category=category,
            items=len(members),
            units=sum(i.quantity for i in members),
            value=round(sum(i.value for i in members), 2),
        ))
    return rows


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def format_table(headers: list[str], rows: list[list[object]]) -> str:
    """A plain-text table: a header line, a rule, one line per row; numbers right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    numeric = [bool(rows) and all(isinstance(row[i], int | float) for row in rows)
               for i in range(len(headers))]

    def line(values: list[str]) -> str:
        parts = []
        for i, text in enumerate(values):
            parts.append(text.rjust(widths[i]) if numeric[i] else text.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells]
    return "\\n".join(out)


def stock_report(inventory: Inventory) -> str:
    """The whole report: every item, the category totals and the low-stock list."""
    items = sorted(inventory.items.values(), key=lambda i: (i.category, i.name))
    table = format_table(
        ["name", "category", "qty", "price", "value"],
        [[i.name, i.category, i.quantity, i.unit_price, i.value] for i in items],
    )
    summary = format_table(
        ["category", "items", "units", "value"],
        [[r.category, r.items, r.units, r.value] for r in category_summary(inventory)],
    )
    low = low_stock(inventory)
    lines = ["Stock", table, "", "By category", summary, ""]
    if low:
        lines.append("Reorder: " + ", ".join(f"{i.name} ({i.quantity})" for i in low))
    else:
        lines.append("Reorder: nothing")
    lines.append(f"Total value: {inventory.total_value():.2f}")
    return "\\n".join(lines)


def to_csv(inventory: Inventory) -> str:
    """The inventory as CSV with a header row, items sorted by name."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\\n")
    writer.writerow(CSV_FIELDS)
    for name in sorted(inventory.items):
        item = inventory.items[name]
        writer.writerow([item.name, item.category, item.quantity, f"{item.unit_price:.2f}",
                         item.reorder_level])
    return buffer.getvalue()


def from_csv(text: str) -> Inventory:
    """An inventory read from :func:`to_csv` output.

    Raises ValueError naming the line of a row that is missing fields or holds a bad number.
    """
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or set(CSV_FIELDS) - set(reader.fieldnames):
        raise ValueError(f"the CSV header must name {', '.join(CSV_FIELDS)}")
    inventory = Inventory()
    for number, row in enumerate(reader, start=2):
        try:
            item = Item(
                name=row["name"],
                category=row["category"],
                quantity=int(row["quantity"]),
                unit_price=float(row["unit_price"]),
                reorder_level=int(row["reorder_level"]),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"line {number}: {exc}") from exc
        inventory.add(item)
    return inventory


def reorder_suggestions(inventory: Inventory, multiple: int = 2) -> dict[str, int]:
    """Units to order per low item so that it reaches ``multiple`` times its reorder level."""
    if multiple < 1:
        raise ValueError("multiple must be at least 1")
    return {item.name: item.reorder_level * multiple - item.quantity
            for item in low_stock(inventory)}


def most_valuable(inventory: Inventory, count: int = 3) -> list[Item]:
    """The ``count`` items with the highest stock value, highest first."""
    ranked = sorted(inventory.items.values(), key=lambda i: (-i.value, i.name))
    return ranked[:count]


def changes(before: Inventory, after: Inventory) -> list[Change]:
    """Items whose quantity differs between two snapshots (added items start at 0, removed
    ones end at 0), sorted by name."""
    names = sorted(set(before.items) | set(after.items))
    found = []
    for name in names:
        old = before.items[name].quantity if name in before.items else 0
        new = after.items[name].quantity if name in after.items else 0
        if old != new:
            found.append(Change(name, old, new))
    return found


def changes_report(before: Inventory, after: Inventory) -> str:
    """:func:`changes` as a table with a signed delta column."""
    rows = [[c.name, c.before, c.after, f"{c.delta:+d}"] for c in changes(before, after)]
    if not rows:
        return "No changes"
    return format_table(["name", "before", "after", "delta"], rows)
'''

INV_TEST_REPORT = '''import pytest

from inventory import Inventory, Item
from inventory.report import (
    category_summary,
    changes,
    format_table,
    from_csv,
    low_stock,
    reorder_suggestions,
    stock_report,
    to_csv,
    value_by_category,
)


@pytest.fixture
def inv() -> Inventory:
    inventory = Inventory()
    inventory.add(Item("bolt", "hardware", 120, 0.05, reorder_level=50))
    inventory.add(Item("nut", "hardware", 50, 0.03, reorder_level=50))
    inventory.add(Item("drill", "tools", 1, 49.9, reorder_level=2))
    inventory.add(Item("saw", "tools", 4, 19.5, reorder_level=2))
    return inventory


def test_low_stock_includes_items_at_the_reorder_level(inv):
    assert [i.name for i in low_stock(inv)] == ["drill", "nut"]


def test_value_by_category(inv):
    assert value_by_category(inv) == {"hardware": 7.5, "tools": 127.9}


def test_category_summary(inv):
    rows = category_summary(inv)
    assert [(r.category, r.items, r.units) for r in rows] == [("hardware", 2, 170),
                                                               ("tools", 2, 5)]


def test_format_table_aligns_numbers():
    table = format_table(["name", "qty"], [["a", 1], ["bb", 10]])
    assert table.splitlines() == ["name  qty", "----  ---", "a       1", "bb     10"]


def test_csv_round_trip(inv):
    again = from_csv(to_csv(inv))
    assert to_csv(again) == to_csv(inv)


def test_from_csv_names_the_bad_line():
    with pytest.raises(ValueError, match="line 2"):
        from_csv("name,category,quantity,unit_price,reorder_level\\nx,y,many,1.0,1\\n")


def test_reorder_suggestions(inv):
    assert reorder_suggestions(inv) == {"drill": 3, "nut": 50}


def test_stock_report_mentions_totals(inv):
    report = stock_report(inv)
    assert "Total value: 135.40" in report
    assert "Reorder: drill (1), nut (50)" in report


def test_changes(inv):
    after = from_csv(to_csv(inv))
    after.sell("saw", 3)
    assert [(c.name, c.delta) for c in changes(inv, after)] == [("saw", -3)]
'''

INV_INIT_NEW = '''from inventory.core import Inventory, Item
from inventory.report import low_stock, stock_report, to_csv, from_csv

__all__ = ["Inventory", "Item", "from_csv", "low_stock", "stock_report", "to_csv"]'''

INVENTORY = SessionSpec(
    name="inventory-report",
    description="A new 180-line reporting module for a small package, its tests, a failing "
    "test run, the fix, and an export edit.",
    task="Add inventory/report.py to this inventory package: the items at or below their "
    "reorder level, the stock value per category, a plain-text stock report (a table), CSV "
    "export and import, reorder suggestions and the changes between two snapshots. Write "
    "tests in tests/test_report.py, run the test suite and fix what fails. Finally export "
    "the main report functions from inventory/__init__.py.",
    files={"inventory/__init__.py": INV_INIT, "inventory/core.py": INV_CORE,
           "tests/test_core.py": INV_TEST_CORE, ".gitignore": "__pycache__/\n.pytest_cache/\n"},
    steps=[
        Step("view", "view", {"path": "inventory/core.py"},
             "Which file do you read first? Answer with its path only."),
        Step("create", "create", {"path": "inventory/report.py", "file_text": INV_REPORT},
             "Write the complete module inventory/report.py. Answer with the code only."),
        Step("create", "create", {"path": "tests/test_report.py",
                                  "file_text": INV_TEST_REPORT},
             "Write the complete test file tests/test_report.py. Answer with the code only."),
        Step("test", "bash", {"command": TEST_COMMAND},
             "Which command runs the tests? Answer with the command only.", fails=True),
        Step("view", "view", {"path": "inventory/report.py",
                              "view_range": _lines_of(INV_REPORT, "def low_stock", 0, 4)},
             "Which lines of which file do you look at to find the cause? Answer in one line."),
        Step("fix", "str_replace", {"path": "inventory/report.py", "old_str": INV_REPORT_BUG,
                                    "new_str": INV_REPORT_FIX},
             "Write the line of inventory/report.py that causes the failures, then the same "
             "line fixed."),
        Step("test", "bash", {"command": TEST_COMMAND},
             "Which command checks the fix? Answer with the command only.", fails=False),
        Step("edit", "str_replace", {
            "path": "inventory/__init__.py",
            "old_str": 'from inventory.core import Inventory, Item\n\n'
                       '__all__ = ["Inventory", "Item"]',
            "new_str": INV_INIT_NEW},
             "Write the import lines and __all__ of inventory/__init__.py after exporting the "
             "report functions."),
        Step("test", "bash", {"command": TEST_COMMAND},
             "Which command runs the tests again? Answer with the command only.", fails=False),
        Step("final", "final_answer", {
            "text": "Added inventory/report.py (low stock, value per category, a text stock "
                    "report, CSV export/import, reorder suggestions, snapshot changes) with "
                    "tests in tests/test_report.py. The first run found low_stock excluding "
                    "items exactly at their reorder level; fixed (<=). All 13 tests pass, and "
                    "the main report functions are exported from inventory/__init__.py."},
             "Summarise what you did in three sentences."),
    ])


# --- session 2: a copy-heavy rewrite of a 190-line module -------------------------------

TS_HEAD = '''"""Plain-text statistics: words, sentences, frequencies and readability scores."""

from __future__ import annotations

import re
from collections import Counter

WORD = re.compile(r"[A-Za-z']+")
SENTENCE_END = re.compile(r"[.!?]+")
VOWEL_GROUPS = re.compile(r"[aeiouy]+")


def split_words(text):
    """The words of ``text``, lower-cased, apostrophes kept."""
    return [w.lower() for w in WORD.findall(text)]


'''

# The functions of textstats.py; {fail} marks where bad input is reported.
TS_BODY = '''def sentences(text):
    """The non-empty sentences of ``text``, stripped."""
    if not text.strip():
        {fail}"sentences: the text is empty"{end}
    parts = SENTENCE_END.split(text)
    return [p.strip() for p in parts if p.strip()]


def word_count(text):
    """How many words ``text`` holds."""
    return len(split_words(text))


def average_word_length(text):
    """Mean letters per word, rounded to two decimals."""
    words = {words}
    if not words:
        {fail}"average_word_length: the text has no words"{end}
    return round(sum(len(w) for w in words) / len(words), 2)


def word_frequencies(text, top=10):
    """The ``top`` most common words with their counts, most common first."""
    if top < 1:
        {fail}f"word_frequencies: top must be at least 1, got {top}"{end}
    counts = Counter(split_words(text))
    return counts.most_common(top)


def longest_words(text, n=5):
    """The ``n`` longest distinct words, longest first, ties alphabetical."""
    if n < 1:
        {fail}f"longest_words: n must be at least 1, got {n}"{end}
    unique = set(split_words(text))
    return sorted(unique, key=lambda w: (-len(w), w))[:n]


def syllables(word):
    """A syllable estimate: vowel groups, less a silent final e, at least one."""
    word = word.lower().strip("'")
    if not word:
        {fail}"syllables: empty word"{end}
    count = len(VOWEL_GROUPS.findall(word))
    if word.endswith("e") and not word.endswith("le") and count > 1:
        count -= 1
    return max(count, 1)


def _counts(text):
    words = split_words(text)
    found = sentences(text)
    if not words or not found:
        {fail}"readability: the text needs at least one word and one sentence"{end}
    total_syllables = sum(syllables(w) for w in words)
    return len(words), len(found), total_syllables


def flesch_reading_ease(text):
    """Flesch reading ease (higher is easier), rounded to one decimal."""
    words, count, total = _counts(text)
    score = 206.835 - 1.015 * (words / count) - 84.6 * (total / words)
    return round(score, 1)


def flesch_kincaid_grade(text):
    """Flesch-Kincaid grade level, rounded to one decimal."""
    words, count, total = _counts(text)
    grade = 0.39 * (words / count) + 11.8 * (total / words) - 15.59
    return round(grade, 1)


def lexical_diversity(text):
    """Distinct words over all words (1.0: no word repeats), rounded to three decimals."""
    words = split_words(text)
    if not words:
        {fail}"lexical_diversity: the text has no words"{end}
    return round(len(set(words)) / len(words), 3)


def summary(text):
    """Every statistic of ``text`` in one dict."""
    return {
        "words": word_count(text),
        "sentences": len(sentences(text)),
        "average_word_length": average_word_length(text),
        "lexical_diversity": lexical_diversity(text),
        "reading_ease": flesch_reading_ease(text),
        "grade": flesch_kincaid_grade(text),
        "top_words": word_frequencies(text, 3),
    }


def format_summary(stats):
    """:func:`summary`'s dict as aligned ``name: value`` lines."""
    if not stats:
        {fail}"format_summary: nothing to format"{end}
    width = max(len(name) for name in stats)
    lines = []
    for name, value in stats.items():
        if name == "top_words":
            value = ", ".join(f"{word} ({count})" for word, count in value)
        lines.append(f"{name.ljust(width)}: {value}")
    return "\\n".join(lines)


def compare(a, b):
    """Differences (b minus a) of the numeric statistics of two texts."""
    first, second = summary(a), summary(b)
    return {name: round(second[name] - first[name], 3)
            for name in first if isinstance(first[name], int | float)}


def reading_time(text, words_per_minute=230):
    """Minutes needed to read ``text`` at ``words_per_minute``, rounded up to whole minutes."""
    if words_per_minute <= 0:
        {fail}f"reading_time: words_per_minute must be positive, got {words_per_minute}"{end}
    words = word_count(text)
    return max(1, -(-words // words_per_minute)) if words else 0


def paragraphs(text):
    """The paragraphs of ``text`` (blocks separated by blank lines), stripped."""
    blocks = [block.strip() for block in re.split(r"\\n\\s*\\n", text)]
    found = [block for block in blocks if block]
    if not found:
        {fail}"paragraphs: the text is empty"{end}
    return found


def character_count(text, spaces=True):
    """Characters in ``text``, with or without whitespace."""
    if spaces:
        return len(text)
    return sum(1 for ch in text if not ch.isspace())


def letter_frequencies(text, top=5):
    """The ``top`` most common letters (lower-cased) with their share of all letters."""
    letters = [ch.lower() for ch in text if ch.isalpha()]
    if not letters:
        {fail}"letter_frequencies: the text has no letters"{end}
    counts = Counter(letters)
    return [(letter, round(n / len(letters), 3)) for letter, n in counts.most_common(top)]
'''


def _textstats(fail: str, end: str, words: str) -> str:
    # format() cannot be used (the body holds f-strings); replace the three markers only.
    body = TS_BODY.replace("{fail}", fail).replace("{end}", end).replace("{words}", words)
    return TS_HEAD + body


TS_OLD = _textstats("print(", ")\n        return None", "split_words(text)")
TS_BUGGY = _textstats("raise ValueError(", ")", "split_word(text)")
TS_NEW = _textstats("raise ValueError(", ")", "split_words(text)")

TS_TESTS = '''import textstats


TEXT = "The cat sat on the mat. The dog sat too! Did the bird sing?"


def test_sentences():
    assert textstats.sentences(TEXT) == ["The cat sat on the mat", "The dog sat too",
                                         "Did the bird sing"]


def test_word_count():
    assert textstats.word_count(TEXT) == 14


def test_average_word_length():
    assert textstats.average_word_length("aa bbbb") == 3.0


def test_word_frequencies():
    assert textstats.word_frequencies(TEXT, 2) == [("the", 4), ("sat", 2)]


def test_longest_words():
    assert textstats.longest_words(TEXT, 2) == ["bird", "sing"]


def test_syllables():
    assert [textstats.syllables(w) for w in ("cat", "table", "make", "reading")] == [1, 2, 1, 2]


def test_reading_scores():
    assert textstats.flesch_reading_ease(TEXT) > 90
    assert textstats.flesch_kincaid_grade(TEXT) < 2


def test_lexical_diversity():
    assert textstats.lexical_diversity("a a b b") == 0.5


def test_empty_text_gives_none():
    assert textstats.sentences("   ") is None
    assert textstats.average_word_length("") is None


def test_bad_counts_give_none():
    assert textstats.word_frequencies(TEXT, 0) is None
    assert textstats.longest_words(TEXT, -1) is None


def test_format_summary():
    text = textstats.format_summary(textstats.summary(TEXT))
    assert text.splitlines()[0].startswith("words")
    assert "the (4)" in text


def test_reading_time():
    assert textstats.reading_time("word " * 460) == 2
'''

TS_TESTS_OLD = '''def test_empty_text_gives_none():
    assert textstats.sentences("   ") is None
    assert textstats.average_word_length("") is None


def test_bad_counts_give_none():
    assert textstats.word_frequencies(TEXT, 0) is None
    assert textstats.longest_words(TEXT, -1) is None'''

TS_TESTS_NEW = '''def test_empty_text_raises():
    with pytest.raises(ValueError, match="empty"):
        textstats.sentences("   ")
    with pytest.raises(ValueError, match="no words"):
        textstats.average_word_length("")


def test_bad_counts_raise():
    with pytest.raises(ValueError, match="top must be at least 1"):
        textstats.word_frequencies(TEXT, 0)
    with pytest.raises(ValueError, match="n must be at least 1"):
        textstats.longest_words(TEXT, -1)'''

TS_README = '''# textstats

Word, sentence and readability statistics for plain text, in one module with no dependencies.

```python
import textstats
print(textstats.format_summary(textstats.summary(open("essay.txt").read())))
```

Functions that get bad input (an empty text, a count below one) print a message and return
None.
'''

TEXTSTATS = SessionSpec(
    name="textstats-errors",
    description="A copy-heavy whole-file rewrite of a 190-line module, a test edit, a failing "
    "run caused by a slip in the rewrite, the fix, and a README edit.",
    task="textstats.py reports bad input by printing a message and returning None. Make every "
    "function raise ValueError with that same message instead and keep everything else as it "
    "is. Update the tests that expect None, run the tests, fix what fails, and change the "
    "README's last paragraph to match.",
    files={"textstats.py": TS_OLD, "tests/test_textstats.py": TS_TESTS, "README.md": TS_README,
           ".gitignore": "__pycache__/\n.pytest_cache/\n"},
    steps=[
        Step("view", "view", {"path": "textstats.py"},
             "Which file do you read first? Answer with its path only."),
        Step("view", "view", {"path": "tests/test_textstats.py"},
             "Which file do you read next? Answer with its path only."),
        Step("create", "create", {"path": "textstats.py", "file_text": TS_BUGGY},
             "Write the complete new textstats.py, where bad input raises ValueError with the "
             "same message. Answer with the code only."),
        Step("edit", "str_replace", {"path": "tests/test_textstats.py", "old_str": TS_TESTS_OLD,
                                     "new_str": TS_TESTS_NEW},
             "Write the two tests of tests/test_textstats.py that expect None, then the same "
             "tests expecting ValueError."),
        Step("edit", "str_replace", {"path": "tests/test_textstats.py",
                                     "old_str": "import textstats\n",
                                     "new_str": "import pytest\n\nimport textstats\n"},
             "Write the import lines of tests/test_textstats.py after the change."),
        Step("test", "bash", {"command": TEST_COMMAND},
             "Which command runs the tests? Answer with the command only.", fails=True),
        Step("fix", "str_replace", {"path": "textstats.py", "old_str": "    words = "
                                    "split_word(text)\n", "new_str": "    words = "
                                    "split_words(text)\n"},
             "Write the line of textstats.py that causes the failure, then the same line "
             "fixed."),
        Step("test", "bash", {"command": TEST_COMMAND},
             "Which command checks the fix? Answer with the command only.", fails=False),
        Step("edit", "str_replace", {
            "path": "README.md",
            "old_str": "Functions that get bad input (an empty text, a count below one) print "
                       "a message and return\nNone.\n",
            "new_str": "Functions that get bad input (an empty text, a count below one) raise "
                       "ValueError with a\nmessage that names the function.\n"},
             "Write the README's last paragraph after the change."),
        Step("final", "final_answer", {
            "text": "textstats.py now raises ValueError (same messages) where it printed and "
                    "returned None; the tests expect the errors, a split_word typo from the "
                    "rewrite is fixed, all 12 tests pass, and the README says so."},
             "Summarise what you did in two sentences."),
    ])


# --- session 3: due dates for a todo CLI: edits, a 170-line CLI rewrite, a fix -----------

TODO_STORE = '''"""Tasks kept in a JSON file."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Task:
    id: int
    title: str
    done: bool = False

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "done": self.done}

    @classmethod
    def from_dict(cls, data: dict) -> Task:
        return cls(id=data["id"], title=data["title"], done=data.get("done", False))


class TaskStore:
    """Tasks in memory, loaded from and saved to one JSON file."""

    def __init__(self, path: Path):
        self.path = path
        self.tasks: list[Task] = []
        if path.exists():
            self.tasks = [Task.from_dict(d) for d in json.loads(path.read_text("utf-8"))]

    def save(self) -> None:
        data = [t.to_dict() for t in self.tasks]
        self.path.write_text(json.dumps(data, indent=2) + "\\n", "utf-8")

    def add(self, title: str) -> Task:
        if not title.strip():
            raise ValueError("a task needs a title")
        task = Task(id=max((t.id for t in self.tasks), default=0) + 1, title=title.strip())
        self.tasks.append(task)
        return task

    def get(self, task_id: int) -> Task:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(f"no task {task_id}")

    def complete(self, task_id: int) -> Task:
        task = self.get(task_id)
        task.done = True
        return task

    def remove(self, task_id: int) -> Task:
        task = self.get(task_id)
        self.tasks.remove(task)
        return task

    def open_tasks(self) -> list[Task]:
        return [t for t in self.tasks if not t.done]

    def search(self, words: str) -> list[Task]:
        wanted = words.lower().split()
        return [t for t in self.tasks if all(w in t.title.lower() for w in wanted)]
'''

TODO_TASK_OLD = '''@dataclass
class Task:
    id: int
    title: str
    done: bool = False

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "done": self.done}

    @classmethod
    def from_dict(cls, data: dict) -> Task:
        return cls(id=data["id"], title=data["title"], done=data.get("done", False))'''

TODO_TASK_NEW = '''@dataclass
class Task:
    id: int
    title: str
    done: bool = False
    due: date | None = None

    def to_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "done": self.done,
                "due": self.due.isoformat() if self.due else None}

    @classmethod
    def from_dict(cls, data: dict) -> Task:
        due = data.get("due")
        return cls(id=data["id"], title=data["title"], done=data.get("done", False),
                   due=date.fromisoformat(due) if due else None)'''

TODO_ADD_OLD = '''    def add(self, title: str) -> Task:
        if not title.strip():
            raise ValueError("a task needs a title")
        task = Task(id=max((t.id for t in self.tasks), default=0) + 1, title=title.strip())
        self.tasks.append(task)
        return task'''

TODO_ADD_NEW = '''    def add(self, title: str, due: date | None = None) -> Task:
        if not title.strip():
            raise ValueError("a task needs a title")
        task = Task(id=max((t.id for t in self.tasks), default=0) + 1, title=title.strip(),
                    due=due)
        self.tasks.append(task)
        return task

    def overdue(self, today: date) -> list[Task]:
        """Open tasks due before ``today``, earliest first."""
        late = [t for t in self.open_tasks() if t.due is not None and t.due < today]
        return sorted(late, key=lambda t: (t.due, t.id))'''

TODO_CLI_HEAD = '''"""The ``todo`` command: add, list, done, remove, search{extra_doc}."""

from __future__ import annotations

import argparse
import sys
from datetime import date
from pathlib import Path

from todo.store import Task, TaskStore

DEFAULT_FILE = Path("todo.json")


def _line(task: Task) -> str:
    mark = "x" if task.done else " "
{line_body}


'''

TODO_LINE_OLD = '    return f"[{mark}] {task.id:>3}  {task.title}"'
TODO_LINE_NEW = '''    due = f"  (due {task.due.isoformat()})" if task.due else ""
    return f"[{mark}] {task.id:>3}  {task.title}{due}"'''

TODO_CLI_COMMANDS = '''def cmd_add(store: TaskStore, args: argparse.Namespace) -> int:
    task = store.add(" ".join(args.title){add_due})
    store.save()
    print(f"added {task.id}: {task.title}")
    return 0


def cmd_list(store: TaskStore, args: argparse.Namespace) -> int:
    tasks = store.tasks if args.all else store.open_tasks()
    if not tasks:
        print("nothing to do" if not args.all else "no tasks")
        return 0
    for task in tasks:
        print(_line(task))
    return 0


def cmd_done(store: TaskStore, args: argparse.Namespace) -> int:
    for task_id in args.ids:
        try:
            task = store.complete(task_id)
        except KeyError as exc:
            print(f"error: {exc.args[0]}", file=sys.stderr)
            return 1
        print(f"done {task.id}: {task.title}")
    store.save()
    return 0


def cmd_remove(store: TaskStore, args: argparse.Namespace) -> int:
    try:
        task = store.remove(args.id)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 1
    store.save()
    print(f"removed {task.id}: {task.title}")
    return 0


def cmd_search(store: TaskStore, args: argparse.Namespace) -> int:
    found = store.search(" ".join(args.words))
    for task in found:
        print(_line(task))
    if not found:
        print("no match")
    return 0


def cmd_stats(store: TaskStore, args: argparse.Namespace) -> int:
    total = len(store.tasks)
    done = total - len(store.open_tasks())
    share = f"{done / total:.0%}" if total else "-"
    print(f"{total} tasks, {done} done ({share})")
    return 0


def cmd_rename(store: TaskStore, args: argparse.Namespace) -> int:
    title = " ".join(args.title).strip()
    if not title:
        print("error: a task needs a title", file=sys.stderr)
        return 1
    try:
        task = store.get(args.id)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 1
    task.title = title
    store.save()
    print(f"renamed {task.id}: {task.title}")
    return 0


def cmd_clear(store: TaskStore, args: argparse.Namespace) -> int:
    finished = [t for t in store.tasks if t.done]
    for task in finished:
        store.remove(task.id)
    store.save()
    print(f"cleared {len(finished)} done task(s)")
    return 0

{overdue_cmd}
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="todo", description="A small todo list.")
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE,
                        help="the JSON file holding the tasks (default: todo.json)")
    sub = parser.add_subparsers(dest="command", required=True)

    add = sub.add_parser("add", help="add a task")
    add.add_argument("title", nargs="+", help="what to do")
{add_args}    add.set_defaults(func=cmd_add)

    listing = sub.add_parser("list", help="show open tasks")
    listing.add_argument("--all", action="store_true", help="show done tasks too")
    listing.set_defaults(func=cmd_list)

    done = sub.add_parser("done", help="mark tasks as done")
    done.add_argument("ids", nargs="+", type=int, help="task ids")
    done.set_defaults(func=cmd_done)

    remove = sub.add_parser("remove", help="delete a task")
    remove.add_argument("id", type=int, help="task id")
    remove.set_defaults(func=cmd_remove)

    search = sub.add_parser("search", help="find tasks whose title holds every word")
    search.add_argument("words", nargs="+", help="words to look for")
    search.set_defaults(func=cmd_search)

    stats = sub.add_parser("stats", help="count tasks")
    stats.set_defaults(func=cmd_stats)

    rename = sub.add_parser("rename", help="change a task's title")
    rename.add_argument("id", type=int, help="task id")
    rename.add_argument("title", nargs="+", help="the new title")
    rename.set_defaults(func=cmd_rename)

    clear = sub.add_parser("clear", help="delete every done task")
    clear.set_defaults(func=cmd_clear)
{overdue_parser}
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        store = TaskStore(args.file)
    except ValueError as exc:
        print(f"error: {args.file} is not a task file ({exc})", file=sys.stderr)
        return 2
    try:
        return args.func(store, args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
'''

TODO_OVERDUE_CMD = '''
def cmd_overdue(store: TaskStore, args: argparse.Namespace) -> int:
    today = date.fromisoformat(args.today) if args.today else date.today()
    late = store.overdue(today)
    for task in late:
        print(_line(task))
    if not late:
        print("nothing overdue")
    return 0

'''

TODO_OVERDUE_PARSER = '''
    overdue = sub.add_parser("overdue", help="show open tasks past their due date")
    overdue.add_argument("--today", help="the date to compare with (YYYY-MM-DD)")
    overdue.set_defaults(func=cmd_overdue)
'''

TODO_ADD_DUE_BUG = ", due=date.fromisoformat(args.due)"
TODO_ADD_DUE_FIX = ",\n                     due=date.fromisoformat(args.due) if args.due else None"


def _todo_cli(new: bool, add_due: str = "") -> str:
    head = TODO_CLI_HEAD.replace("{extra_doc}", ", stats and overdue" if new else " and stats")
    head = head.replace("{line_body}", TODO_LINE_NEW if new else TODO_LINE_OLD)
    body = TODO_CLI_COMMANDS.replace("{add_due}", add_due)
    body = body.replace("{overdue_cmd}", TODO_OVERDUE_CMD if new else "")
    body = body.replace("{add_args}", '    add.add_argument("--due", help="due date '
                        '(YYYY-MM-DD)")\n' if new else "")
    body = body.replace("{overdue_parser}", TODO_OVERDUE_PARSER if new else "")
    return head + body


TODO_CLI_OLD = _todo_cli(False)
TODO_CLI_BUGGY = _todo_cli(True, TODO_ADD_DUE_BUG)

TODO_TEST_STORE = '''from todo.store import TaskStore


def test_add_complete_and_reload(tmp_path):
    path = tmp_path / "todo.json"
    store = TaskStore(path)
    store.add("write report")
    store.add("call bob")
    store.complete(1)
    store.save()
    again = TaskStore(path)
    assert [(t.id, t.done) for t in again.tasks] == [(1, True), (2, False)]


def test_search_needs_every_word(tmp_path):
    store = TaskStore(tmp_path / "todo.json")
    store.add("buy milk and bread")
    store.add("buy stamps")
    assert [t.id for t in store.search("buy bread")] == [1]
'''

TODO_TEST_CLI = '''from todo.cli import main


def test_add_and_list(tmp_path, capsys):
    path = str(tmp_path / "todo.json")
    assert main(["--file", path, "add", "water", "the", "plants"]) == 0
    assert main(["--file", path, "list"]) == 0
    assert "water the plants" in capsys.readouterr().out


def test_done_unknown_task(tmp_path, capsys):
    assert main(["--file", str(tmp_path / "todo.json"), "done", "7"]) == 1
    assert "no task 7" in capsys.readouterr().err
'''

TODO_TEST_DUE = '''from datetime import date

from todo.cli import main
from todo.store import TaskStore


def test_due_dates_are_saved(tmp_path):
    path = tmp_path / "todo.json"
    store = TaskStore(path)
    store.add("pay rent", due=date(2026, 12, 1))
    store.save()
    assert TaskStore(path).tasks[0].due == date(2026, 12, 1)


def test_overdue_lists_open_late_tasks(tmp_path):
    store = TaskStore(tmp_path / "todo.json")
    store.add("late", due=date(2026, 11, 1))
    store.add("later", due=date(2026, 12, 24))
    store.add("done late", due=date(2026, 10, 1))
    store.complete(3)
    assert [t.title for t in store.overdue(date(2026, 12, 1))] == ["late"]


def test_overdue_command(tmp_path, capsys):
    path = str(tmp_path / "todo.json")
    assert main(["--file", path, "add", "file", "taxes", "--due", "2026-04-30"]) == 0
    assert main(["--file", path, "overdue", "--today", "2026-05-02"]) == 0
    out = capsys.readouterr().out
    assert "file taxes  (due 2026-04-30)" in out
'''

TODO = SessionSpec(
    name="todo-due-dates",
    description="Two edits to a store module, a copy-heavy 170-line rewrite of a CLI, a new "
    "test file, a failing run from a bug in the rewrite, the fix.",
    task="Add due dates to the todo app: `todo add TITLE --due YYYY-MM-DD` stores a due date "
    "and `todo list` shows it; `todo overdue [--today YYYY-MM-DD]` lists open tasks whose due "
    "date has passed. Change todo/store.py and todo/cli.py, add tests in tests/test_due.py, "
    "run the tests and fix what fails.",
    files={"todo/__init__.py": '"""A small todo list kept in a JSON file."""\n',
           "todo/store.py": TODO_STORE, "todo/cli.py": TODO_CLI_OLD,
           "tests/test_store.py": TODO_TEST_STORE, "tests/test_cli.py": TODO_TEST_CLI,
           ".gitignore": "__pycache__/\n.pytest_cache/\n"},
    steps=[
        Step("view", "view", {"path": "."},
             "Which folder or file do you look at first? Answer with its path only."),
        Step("view", "view", {"path": "todo/store.py"},
             "Which file do you read next? Answer with its path only."),
        Step("edit", "str_replace", {"path": "todo/store.py", "old_str": TODO_TASK_OLD,
                                     "new_str": TODO_TASK_NEW},
             "Write the Task class of todo/store.py as it is, then with a due date."),
        Step("edit", "str_replace", {"path": "todo/store.py",
                                     "old_str": "from dataclasses import dataclass\n",
                                     "new_str": "from dataclasses import dataclass\n"
                                                "from datetime import date\n"},
             "Write the import lines of todo/store.py after the change."),
        Step("edit", "str_replace", {"path": "todo/store.py", "old_str": TODO_ADD_OLD,
                                     "new_str": TODO_ADD_NEW},
             "Write TaskStore.add as it is, then taking a due date, followed by a new "
             "overdue(today) method."),
        Step("view", "view", {"path": "todo/cli.py"},
             "Which file do you read next? Answer with its path only."),
        Step("create", "create", {"path": "todo/cli.py", "file_text": TODO_CLI_BUGGY},
             "Write the complete new todo/cli.py with the --due option, due dates in list "
             "lines and the overdue command. Answer with the code only."),
        Step("create", "create", {"path": "tests/test_due.py", "file_text": TODO_TEST_DUE},
             "Write the complete test file tests/test_due.py. Answer with the code only."),
        Step("test", "bash", {"command": TEST_COMMAND},
             "Which command runs the tests? Answer with the command only.", fails=True),
        Step("fix", "str_replace", {"path": "todo/cli.py", "old_str": TODO_ADD_DUE_BUG,
                                    "new_str": TODO_ADD_DUE_FIX},
             "Write the line of todo/cli.py that causes the failures, then the same line "
             "fixed."),
        Step("test", "bash", {"command": TEST_COMMAND},
             "Which command checks the fix? Answer with the command only.", fails=False),
        Step("final", "final_answer", {
            "text": "Tasks have an optional due date (store.add(title, due), saved in the "
                    "JSON file, shown in list lines), TaskStore.overdue(today) and a `todo "
                    "overdue [--today]` command; tests in tests/test_due.py. A crash when "
                    "--due was not given is fixed; all 7 tests pass."},
             "Summarise what you did in two sentences."),
    ])

# --- session 4: pre-releases for a version library: nine edits across a 277-line module ----

VC_INIT = '''"""Semantic version numbers and ranges."""

from vercheck.versions import (
    Version,
    VersionError,
    bump,
    compare,
    max_satisfying,
    parse,
    satisfies,
)

__all__ = ["Version", "VersionError", "bump", "compare", "max_satisfying", "parse", "satisfies"]
'''

# Raw strings: the module's regular expressions hold backslashes, and it has no escapes.
VC_MODULE = r'''"""Version numbers and version ranges, written the way package managers write them.

:func:`parse` reads ``MAJOR.MINOR.PATCH`` (a leading ``v`` is allowed), :class:`Version`
orders versions, :func:`bump` makes the next one, :func:`diff` says how two differ, and
:func:`satisfies` checks a version against a range such as ``^1.2.0``, ``~1.4``,
``>=1.0.0 <2.0.0``, ``1.x``, or several of them joined with ``||``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import total_ordering

VERSION_RE = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)$"
)
PARTIAL_RE = re.compile(
    r"^v?(?P<major>0|[1-9]\d*|[xX*])(?:\.(?P<minor>0|[1-9]\d*|[xX*]))?"
    r"(?:\.(?P<patch>0|[1-9]\d*|[xX*]))?$"
)
COMPARATOR_RE = re.compile(r"^(?P<op><=|>=|<|>|=)?(?P<version>\S+)$")
PARTS = ("major", "minor", "patch")
WILDCARDS = ("x", "X", "*")


class VersionError(ValueError):
    """A version or a range that cannot be read; the message says what is wrong."""


@total_ordering
@dataclass(frozen=True)
class Version:
    """One version: three non-negative integers, compared part by part."""

    major: int
    minor: int
    patch: int

    def __post_init__(self) -> None:
        for name in PARTS:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise VersionError(f"{name} must be a non-negative integer, not {value!r}")

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    def _key(self) -> tuple:
        return (self.major, self.minor, self.patch)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()


def parse(text: str) -> Version:
    """The version ``text`` names.

    Surrounding whitespace and a leading ``v`` are ignored. Raises :class:`VersionError`
    saying why ``text`` is not a version.
    """
    if not isinstance(text, str):
        raise VersionError(f"a version must be a string, not {type(text).__name__}")
    match = VERSION_RE.match(text.strip())
    if match is None:
        raise VersionError(f"{text!r} is not a version (expected MAJOR.MINOR.PATCH)")
    return Version(int(match["major"]), int(match["minor"]), int(match["patch"]))


def is_valid(text: str) -> bool:
    """True when :func:`parse` accepts ``text``."""
    try:
        parse(text)
    except VersionError:
        return False
    return True


def coerce(text: str) -> Version | None:
    """The first version-like number in ``text``, missing parts taken as 0 (``"release 2.1"``
    gives 2.1.0); None when there is none."""
    match = re.search(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    if match is None:
        return None
    major, minor, patch = (int(g) if g is not None else 0 for g in match.groups())
    return Version(major, minor, patch)


def _as_version(value: Version | str) -> Version:
    return value if isinstance(value, Version) else parse(value)


def compare(a: Version | str, b: Version | str) -> int:
    """-1, 0 or 1 as ``a`` is lower than, equal to or higher than ``b``."""
    first, second = _as_version(a), _as_version(b)
    return (first > second) - (first < second)


def sort_versions(versions: Iterable[Version | str], reverse: bool = False) -> list[Version]:
    """The versions parsed and sorted, lowest first (highest first with ``reverse``)."""
    return sorted((_as_version(v) for v in versions), reverse=reverse)


def diff(a: Version | str, b: Version | str) -> str | None:
    """The most significant part in which two versions differ (``"major"``, ``"minor"`` or
    ``"patch"``); None when they are equal."""
    first, second = _as_version(a), _as_version(b)
    for name in PARTS:
        if getattr(first, name) != getattr(second, name):
            return name
    return None


def bump(version: Version | str, part: str) -> Version:
    """The next version after ``version`` at ``part`` (``major``, ``minor`` or ``patch``); the
    parts after it start again at 0."""
    v = _as_version(version)
    if part == "major":
        return Version(v.major + 1, 0, 0)
    if part == "minor":
        return Version(v.major, v.minor + 1, 0)
    if part == "patch":
        return Version(v.major, v.minor, v.patch + 1)
    raise VersionError(f"part must be one of {', '.join(PARTS)}, not {part!r}")


def next_versions(version: Version | str) -> dict[str, Version]:
    """The next major, minor and patch versions, for a release prompt that offers all three."""
    return {part: bump(version, part) for part in PARTS}


# --- ranges ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparator:
    """One condition on a version, such as ``>=1.2.0``."""

    op: str
    version: Version

    def test(self, version: Version) -> bool:
        """True when ``version`` meets the condition."""
        if self.op == "<":
            return version < self.version
        if self.op == "<=":
            return version <= self.version
        if self.op == ">":
            return version > self.version
        if self.op == ">=":
            return version >= self.version
        return version == self.version

    def __str__(self) -> str:
        return f"{self.op}{self.version}"


def _partial(text: str) -> tuple[int | None, int | None, int | None]:
    """The three parts of a partial version such as ``1.2`` or ``1.x``; None for a missing
    or wildcard part. A number may not follow a wildcard (``1.x.3``)."""
    match = PARTIAL_RE.match(text)
    if match is None:
        raise VersionError(f"{text!r} is not a version or a partial version")
    parts = [None if g is None or g in WILDCARDS else int(g) for g in match.groups()]
    for before, after in zip(parts, parts[1:]):
        if before is None and after is not None:
            raise VersionError(f"{text!r}: a number cannot follow a wildcard")
    return parts[0], parts[1], parts[2]


def _caret(text: str) -> list[Comparator]:
    """``^1.2.3``: changes that keep the left-most non-zero part (``^0.2.3``: <0.3.0)."""
    major, minor, patch = _partial(text)
    if major is None:
        return []
    low = Version(major, minor or 0, patch or 0)
    if major > 0 or minor is None:
        high = Version(major + 1, 0, 0)
    elif minor > 0 or patch is None:
        high = Version(0, minor + 1, 0)
    else:
        high = Version(0, 0, patch + 1)
    return [Comparator(">=", low), Comparator("<", high)]


def _tilde(text: str) -> list[Comparator]:
    """``~1.2.3``: patch-level changes (``~1``: minor-level changes)."""
    major, minor, patch = _partial(text)
    if major is None:
        return []
    low = Version(major, minor or 0, patch or 0)
    high = Version(major + 1, 0, 0) if minor is None else Version(major, minor + 1, 0)
    return [Comparator(">=", low), Comparator("<", high)]


def _plain(text: str) -> list[Comparator]:
    """A version with no operator: exactly that version, or every version a partial one
    leaves open (``1.2``, ``1.x``, ``*``)."""
    if is_valid(text):
        return [Comparator("=", parse(text))]
    major, minor, _ = _partial(text)
    if major is None:
        return []
    if minor is None:
        return [Comparator(">=", Version(major, 0, 0)), Comparator("<", Version(major + 1, 0, 0))]
    return [Comparator(">=", Version(major, minor, 0)),
            Comparator("<", Version(major, minor + 1, 0))]


def _comparators(term: str) -> list[Comparator]:
    """The comparators one space-separated term of a range stands for."""
    if term.startswith("^"):
        return _caret(term[1:])
    if term.startswith("~"):
        return _tilde(term[1:])
    match = COMPARATOR_RE.match(term)
    if match is None:
        raise VersionError(f"{term!r} is not a range term")
    if match["op"] is None:
        return _plain(match["version"])
    return [Comparator(match["op"], parse(match["version"]))]


def parse_range(spec: str) -> list[list[Comparator]]:
    """A range as its alternatives (split at ``||``), each a list of comparators that must all
    hold; an empty list holds for every version. Raises :class:`VersionError` for a bad
    range."""
    if not spec.strip():
        return [[]]
    alternatives = []
    for part in spec.split("||"):
        terms = part.split()
        if not terms:
            raise VersionError(f"{spec!r} has an empty alternative")
        alternatives.append([c for term in terms for c in _comparators(term)])
    return alternatives


def satisfies(version: Version | str, spec: str) -> bool:
    """True when ``version`` is in the range ``spec``."""
    v = _as_version(version)
    return any(all(c.test(v) for c in alt) for alt in parse_range(spec))


def max_satisfying(versions: Iterable[Version | str], spec: str) -> Version | None:
    """The highest of ``versions`` in the range ``spec``; None when none is."""
    alternatives = parse_range(spec)
    found = [v for v in map(_as_version, versions)
             if any(all(c.test(v) for c in alt) for alt in alternatives)]
    return max(found, default=None)


def min_version(spec: str) -> Version | None:
    """The lowest version the range ``spec`` admits; None when it admits none."""
    candidates = []
    for alternative in parse_range(spec):
        low = Version(0, 0, 0)
        for c in alternative:
            if c.op in (">=", "="):
                low = max(low, c.version)
            elif c.op == ">":
                low = max(low, bump(c.version, "patch"))
        if all(c.test(low) for c in alternative):
            candidates.append(low)
    return min(candidates, default=None)


def describe_range(spec: str) -> str:
    """The range with every shorthand spelled out, alternatives joined with `` || ``
    (``^1.2.0`` gives ``>=1.2.0 <2.0.0``; a range that admits everything gives ``*``)."""
    parts = []
    for alternative in parse_range(spec):
        parts.append(" ".join(str(c) for c in alternative) or "*")
    return " || ".join(parts)
'''

VC_TESTS = '''import pytest

from vercheck.versions import (
    Version,
    VersionError,
    bump,
    coerce,
    compare,
    describe_range,
    diff,
    max_satisfying,
    min_version,
    parse,
    satisfies,
    sort_versions,
)


def test_parse_and_str():
    assert parse("1.2.3") == Version(1, 2, 3)
    assert parse(" v0.10.0 ") == Version(0, 10, 0)
    assert str(Version(2, 0, 11)) == "2.0.11"


@pytest.mark.parametrize("text", ["1.2", "1.2.3.4", "01.2.3", "1.2.x", "one.two.three", ""])
def test_parse_refuses_what_is_not_a_version(text):
    with pytest.raises(VersionError):
        parse(text)


def test_ordering_is_numeric():
    assert parse("1.10.0") > parse("1.9.9")
    assert compare("2.0.0", "2.0.0") == 0
    assert compare("0.9.0", "1.0.0") == -1
    assert [str(v) for v in sort_versions(["1.0.10", "1.0.2", "0.9.0"])] == [
        "0.9.0", "1.0.2", "1.0.10"]


def test_coerce_and_diff():
    assert coerce("release 2.1") == Version(2, 1, 0)
    assert coerce("no digits") is None
    assert diff("1.2.3", "1.3.0") == "minor"
    assert diff("1.2.3", "1.2.3") is None


def test_bump():
    assert bump("1.2.3", "major") == Version(2, 0, 0)
    assert bump("1.2.3", "minor") == Version(1, 3, 0)
    assert bump("1.2.3", "patch") == Version(1, 2, 4)
    with pytest.raises(VersionError, match="part must be one of"):
        bump("1.2.3", "build")


@pytest.mark.parametrize("version,spec,expected", [
    ("1.9.0", "^1.2.0", True),
    ("2.0.0", "^1.2.0", False),
    ("0.2.9", "^0.2.3", True),
    ("0.3.0", "^0.2.3", False),
    ("1.2.9", "~1.2.3", True),
    ("1.3.0", "~1.2.3", False),
    ("1.7.2", "1.x", True),
    ("1.2.5", "1.2", True),
    ("3.1.0", ">=1.0.0 <2.0.0 || >=3.0.0", True),
    ("2.5.0", ">=1.0.0 <2.0.0 || >=3.0.0", False),
    ("4.5.6", "*", True),
])
def test_satisfies(version, spec, expected):
    assert satisfies(version, spec) is expected


def test_bad_ranges_are_refused():
    for spec in ("1.x.3", ">=1.2", "^banana", "1.0.0 ||"):
        with pytest.raises(VersionError):
            satisfies("1.0.0", spec)


def test_max_and_min():
    found = ["1.2.0", "1.4.1", "2.0.0", "1.10.0"]
    assert max_satisfying(found, "^1.0.0") == Version(1, 10, 0)
    assert max_satisfying(found, "^3.0.0") is None
    assert min_version(">1.2.3 <2.0.0") == Version(1, 2, 4)
    assert min_version(">=2.0.0 <1.0.0") is None


def test_describe_range():
    assert describe_range("^1.2.0 || ~0.3") == ">=1.2.0 <2.0.0 || >=0.3.0 <0.4.0"
    assert describe_range("*") == "*"
'''

# The edits, top to bottom, as (old_str, new_str); each old_str matches once where it is made.
VC_DOC_OLD = '''\
:func:`parse` reads ``MAJOR.MINOR.PATCH`` (a leading ``v`` is allowed), :class:`Version`
orders versions, :func:`bump` makes the next one, :func:`diff` says how two differ, and
:func:`satisfies` checks a version against a range such as ``^1.2.0``, ``~1.4``,
``>=1.0.0 <2.0.0``, ``1.x``, or several of them joined with ``||``.'''

VC_DOC_NEW = '''\
:func:`parse` reads ``MAJOR.MINOR.PATCH`` with an optional pre-release (``1.4.0-rc.1``; a
leading ``v`` is allowed), :class:`Version` orders versions the semantic-versioning way (a
pre-release before its release), :func:`bump` makes the next one, :func:`diff` says how two
differ, and :func:`satisfies` checks a version against a range such as ``^1.2.0``, ``~1.4``,
``>=1.0.0 <2.0.0``, ``1.x``, or several of them joined with ``||``; ranges leave
pre-releases out unless asked to take them.'''

VC_RE_OLD = r'''VERSION_RE = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)$"
)'''

VC_RE_NEW = r'''VERSION_RE = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)"
    r"(?:-(?P<prerelease>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)'''

VC_FIELDS_OLD = '''\
    """One version: three non-negative integers, compared part by part."""

    major: int
    minor: int
    patch: int'''

VC_FIELDS_NEW = '''\
    """One version: three non-negative integers, compared part by part, and an optional
    pre-release (its dot-separated identifiers, such as ``("rc", "1")``), which comes before
    the release."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()'''

VC_KEY_OLD = '''\
    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    def _key(self) -> tuple:
        return (self.major, self.minor, self.patch)'''

# The slip the failing test run finds: numbers and words in one tuple do not compare.
VC_KEY_BUG = "        pre = tuple(int(p) if p.isdigit() else p for p in self.prerelease)\n"
VC_KEY_FIX = ("        pre = tuple((0, int(p), \"\") if p.isdigit() else (1, 0, p)\n"
              "                    for p in self.prerelease)\n")

VC_KEY_NEW = '''\
    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        return f"{text}-{'.'.join(self.prerelease)}" if self.prerelease else text

    @property
    def release(self) -> Version:
        """The same version without its pre-release."""
        return Version(self.major, self.minor, self.patch)

    def _key(self) -> tuple:
        # A release sorts after its pre-releases; numeric identifiers compare as numbers.
''' + VC_KEY_BUG + '''\
        return (self.major, self.minor, self.patch, not self.prerelease, pre)'''

VC_PARSE_OLD = '''\
    match = VERSION_RE.match(text.strip())
    if match is None:
        raise VersionError(f"{text!r} is not a version (expected MAJOR.MINOR.PATCH)")
    return Version(int(match["major"]), int(match["minor"]), int(match["patch"]))'''

VC_PARSE_NEW = '''\
    match = VERSION_RE.match(text.strip())
    if match is None:
        raise VersionError(f"{text!r} is not a version (expected MAJOR.MINOR.PATCH or "
                           "MAJOR.MINOR.PATCH-PRERELEASE)")
    prerelease = tuple(match["prerelease"].split(".")) if match["prerelease"] else ()
    for identifier in prerelease:
        if identifier.isdigit() and identifier != "0" and identifier.startswith("0"):
            raise VersionError(f"{text!r}: the numeric pre-release identifier {identifier!r} "
                               "has a leading zero")
    return Version(int(match["major"]), int(match["minor"]), int(match["patch"]), prerelease)'''

VC_DIFF_OLD = '''\
    """The most significant part in which two versions differ (``"major"``, ``"minor"`` or
    ``"patch"``); None when they are equal."""
    first, second = _as_version(a), _as_version(b)
    for name in PARTS:
        if getattr(first, name) != getattr(second, name):
            return name
    return None'''

VC_DIFF_NEW = '''\
    """The most significant part in which two versions differ (``"major"``, ``"minor"``,
    ``"patch"``, or ``"prerelease"`` when only the pre-release does); None when they are
    equal."""
    first, second = _as_version(a), _as_version(b)
    for name in PARTS:
        if getattr(first, name) != getattr(second, name):
            return name
    return "prerelease" if first.prerelease != second.prerelease else None'''

VC_BUMP_OLD = '''\
    """The next version after ``version`` at ``part`` (``major``, ``minor`` or ``patch``); the
    parts after it start again at 0."""
    v = _as_version(version)'''

VC_BUMP_NEW = '''\
    """The next version after ``version`` at ``part`` (``major``, ``minor`` or ``patch``); the
    parts after it start again at 0. The result is a release: a pre-release whose release is
    already the next version at ``part`` gives that release (``1.4.0-rc.1`` gives 1.4.0 at
    ``minor`` or ``patch``, 2.0.0 at ``major``)."""
    v = _as_version(version)
    if v.prerelease and part in PARTS and not any(
            getattr(v, later) for later in PARTS[PARTS.index(part) + 1:]):
        return v.release'''

VC_SATISFIES_OLD = '''\
def satisfies(version: Version | str, spec: str) -> bool:
    """True when ``version`` is in the range ``spec``."""
    v = _as_version(version)
    return any(all(c.test(v) for c in alt) for alt in parse_range(spec))'''

VC_SATISFIES_NEW = '''\
def _admits(alternative: list[Comparator], version: Version,
            include_prerelease: bool) -> bool:
    """True when every comparator of ``alternative`` holds for ``version``. A pre-release
    also needs ``include_prerelease``, or a comparator that names a pre-release of the same
    release (``>=1.4.0-rc.1`` admits 1.4.0-rc.2 but not 1.5.0-beta)."""
    if not all(c.test(version) for c in alternative):
        return False
    if not version.prerelease or include_prerelease:
        return True
    return any(c.version.prerelease and c.version.release == version.release
               for c in alternative)


def satisfies(version: Version | str, spec: str, include_prerelease: bool = False) -> bool:
    """True when ``version`` is in the range ``spec``; pre-releases only as :func:`_admits`
    says."""
    v = _as_version(version)
    return any(_admits(alt, v, include_prerelease) for alt in parse_range(spec))'''

VC_MAX_OLD = '''\
def max_satisfying(versions: Iterable[Version | str], spec: str) -> Version | None:
    """The highest of ``versions`` in the range ``spec``; None when none is."""
    alternatives = parse_range(spec)
    found = [v for v in map(_as_version, versions)
             if any(all(c.test(v) for c in alt) for alt in alternatives)]'''

VC_MAX_NEW = '''\
def max_satisfying(versions: Iterable[Version | str], spec: str,
                   include_prerelease: bool = False) -> Version | None:
    """The highest of ``versions`` in the range ``spec`` (pre-releases as in
    :func:`satisfies`); None when none is."""
    alternatives = parse_range(spec)
    found = [v for v in map(_as_version, versions)
             if any(_admits(alt, v, include_prerelease) for alt in alternatives)]'''

VC_EDITS = [
    (VC_DOC_OLD, VC_DOC_NEW,
     "Write the first paragraph of vercheck/versions.py's module docstring as it is, then "
     "mentioning pre-releases."),
    (VC_RE_OLD, VC_RE_NEW,
     "Write the VERSION_RE definition as it is, then accepting an optional pre-release."),
    (VC_FIELDS_OLD, VC_FIELDS_NEW,
     "Write the docstring and fields of the Version class as they are, then with a "
     "pre-release field."),
    (VC_KEY_OLD, VC_KEY_NEW,
     "Write Version.__str__ and Version._key as they are, then with the pre-release in the "
     "text and in the ordering, and a release property between them."),
    (VC_PARSE_OLD, VC_PARSE_NEW,
     "Write the end of parse() as it is, then reading and checking the pre-release."),
    (VC_DIFF_OLD, VC_DIFF_NEW,
     "Write the body of diff() as it is, then saying \"prerelease\" when only the "
     "pre-release differs."),
    (VC_BUMP_OLD, VC_BUMP_NEW,
     "Write the start of bump() as it is, then giving the release of a pre-release where "
     "that is the next version."),
    (VC_SATISFIES_OLD, VC_SATISFIES_NEW,
     "Write satisfies() as it is, then leaving pre-releases out unless asked, with the check "
     "in a helper."),
    (VC_MAX_OLD, VC_MAX_NEW,
     "Write the start of max_satisfying() as it is, then with include_prerelease."),
]


def _edited(text: str, edits: list[tuple[str, str, str]]) -> str:
    """``text`` after the edits' replacements, made in order; each must match exactly once
    (as str_replace needs), so a spec that would be ambiguous stops here."""
    for old, new, _ in edits:
        if text.count(old) != 1:
            raise SystemExit(f"an edit matches {text.count(old)} times:\n{old}")
        text = text.replace(old, new)
    return text


VC_MODULE_BUGGY = _edited(VC_MODULE, VC_EDITS)

VC_TEST_PRERELEASE = '''import pytest

from vercheck.versions import (
    Version,
    VersionError,
    bump,
    diff,
    max_satisfying,
    parse,
    satisfies,
)


def test_parse_and_str_keep_the_prerelease():
    assert parse("1.4.0-rc.1") == Version(1, 4, 0, ("rc", "1"))
    assert str(parse("v2.0.0-alpha")) == "2.0.0-alpha"
    assert parse("1.4.0-rc.1").release == Version(1, 4, 0)


@pytest.mark.parametrize("text", ["1.0.0-", "1.0.0-rc..1", "1.0.0-01", "1.0.0-rc.01",
                                  "1.0.0-rc_1"])
def test_bad_prereleases_are_refused(text):
    with pytest.raises(VersionError):
        parse(text)


def test_semver_precedence():
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
               "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"]
    shuffled = ordered[4:] + ordered[:4]
    assert [str(v) for v in sorted(map(parse, shuffled))] == ordered


def test_a_prerelease_comes_before_its_release():
    assert parse("2.0.0-rc.1") < parse("2.0.0") < parse("2.0.1-alpha")
    assert diff("2.0.0-rc.1", "2.0.0") == "prerelease"


def test_bump_gives_releases():
    assert bump("1.4.0-rc.1", "patch") == Version(1, 4, 0)
    assert bump("1.4.0-rc.1", "minor") == Version(1, 4, 0)
    assert bump("1.4.0-rc.1", "major") == Version(2, 0, 0)
    assert bump("1.4.2-beta", "minor") == Version(1, 5, 0)


def test_ranges_leave_prereleases_out_unless_asked():
    assert not satisfies("1.5.0-beta", "^1.2.0")
    assert satisfies("1.5.0-beta", "^1.2.0", include_prerelease=True)
    assert satisfies("1.4.0-rc.2", ">=1.4.0-rc.1 <1.5.0")
    assert not satisfies("1.5.0-beta", ">=1.4.0-rc.1")


def test_max_satisfying_with_prereleases():
    found = ["1.3.0", "1.4.0-rc.1", "1.4.0-rc.2"]
    assert max_satisfying(found, "^1.0.0") == Version(1, 3, 0)
    assert max_satisfying(found, "^1.0.0", include_prerelease=True) == parse("1.4.0-rc.2")
'''

VERCHECK = SessionSpec(
    name="vercheck-prereleases",
    description="An edit-heavy session: nine str_replace edits at separate places of a "
    "277-line module (a version and range library), a new test file, a failing run caused "
    "by one of the edits, a look at the lines and the fix.",
    task="Add pre-release versions (1.4.0-rc.1, 2.0.0-alpha) to vercheck/versions.py: parse "
    "and print them, order them the semantic-versioning way (a pre-release comes before its "
    "release; identifiers compare as numbers when numeric, else alphabetically), make diff() "
    "say \"prerelease\" when only that differs, make bump() of a pre-release give its release "
    "where that is the next version (1.4.0-rc.1 at minor or patch gives 1.4.0), and leave "
    "pre-releases out of satisfies() and max_satisfying() unless include_prerelease=True or "
    "the range names a pre-release of the same version. Add tests in "
    "tests/test_prerelease.py, run the test suite and fix what fails.",
    files={"vercheck/__init__.py": VC_INIT, "vercheck/versions.py": VC_MODULE,
           "tests/test_versions.py": VC_TESTS, ".gitignore": "__pycache__/\n.pytest_cache/\n"},
    steps=[
        Step("view", "view", {"path": "."},
             "Which folder or file do you look at first? Answer with its path only."),
        Step("view", "view", {"path": "vercheck/versions.py"},
             "Which file do you read next? Answer with its path only."),
        Step("view", "view", {"path": "tests/test_versions.py"},
             "Which file do you read next? Answer with its path only."),
        *[Step("edit", "str_replace", {"path": "vercheck/versions.py", "old_str": old,
                                       "new_str": new}, ask)
          for old, new, ask in VC_EDITS],
        Step("create", "create", {"path": "tests/test_prerelease.py",
                                  "file_text": VC_TEST_PRERELEASE},
             "Write the complete test file tests/test_prerelease.py. Answer with the code "
             "only."),
        Step("test", "bash", {"command": TEST_COMMAND},
             "Which command runs the tests? Answer with the command only.", fails=True),
        Step("view", "view", {"path": "vercheck/versions.py",
                              "view_range": _lines_of(VC_MODULE_BUGGY, "def _key", 0, 4)},
             "Which lines of which file do you look at to find the cause? Answer in one line."),
        Step("fix", "str_replace", {"path": "vercheck/versions.py", "old_str": VC_KEY_BUG,
                                    "new_str": VC_KEY_FIX},
             "Write the line of vercheck/versions.py that causes the failure, then the same "
             "line fixed."),
        Step("test", "bash", {"command": TEST_COMMAND},
             "Which command checks the fix? Answer with the command only.", fails=False),
        Step("final", "final_answer", {
            "text": "vercheck/versions.py reads, prints and orders pre-releases "
                    "(1.4.0-rc.1 < 1.4.0), diff() reports \"prerelease\", bump() of a "
                    "pre-release gives its release where that is next, and satisfies() and "
                    "max_satisfying() leave pre-releases out unless include_prerelease=True "
                    "or the range names one of the same version; tests are in "
                    "tests/test_prerelease.py. The first run found the new ordering key "
                    "comparing numeric and text identifiers directly (a TypeError), fixed by "
                    "ranking numeric ones first; all 35 tests pass."},
             "Summarise what you did in three sentences."),
    ])

SESSIONS = (INVENTORY, TEXTSTATS, TODO, VERCHECK)


def play(spec: SessionSpec) -> dict[str, Any]:
    """The session's JSON: every call run with the real tools in a fresh workspace."""
    workspace = f"/home/dev/{spec.name}"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        for rel, text in spec.files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text, "utf-8")
        registry = default_registry(Workspace(root))
        turns = []
        try:
            for number, step in enumerate(spec.steps, 1):
                results = []
                if step.tool != "final_answer":
                    obs = registry.call(step.tool, step.arguments)
                    text = obs.text.replace(str(root), workspace)
                    if step.fails is not None and obs.is_error != step.fails:
                        raise SystemExit(f"{spec.name} turn {number}: expected the test run "
                                         f"to {'fail' if step.fails else 'pass'}:\n{text}")
                    if step.fails is None and obs.is_error:
                        raise SystemExit(f"{spec.name} turn {number}: {text}")
                    if step.tool == "str_replace" and "(matched ignoring" in text:
                        # A model's old_str is the file's text verbatim: an edit that only
                        # the tool's tolerant matching places is not one a model would send.
                        raise SystemExit(f"{spec.name} turn {number}: old_str is not the "
                                         f"file's exact text ({text.splitlines()[0]})")
                    results.append({"text": text, "is_error": obs.is_error})
                turns.append({"kind": step.kind, "ask": step.ask,
                              "calls": [{"tool": step.tool, "arguments": step.arguments}],
                              "results": results})
        finally:
            registry.close()
    return {"name": spec.name, "description": spec.description, "workspace": workspace,
            "task": spec.task, "turns": turns}


def main(argv: list[str] | None = None) -> None:
    """Record the sessions named in ``argv`` (every one with ``--all``); with no names, the
    sessions that have no JSON file yet.

    A recorded file is rewritten only when named, because recording again is not byte-stable
    (pytest prints its run time, object addresses and numbered temporary folders) and the
    benchmark's published figures were measured on the files as they are.
    """
    parser = argparse.ArgumentParser(description="Record the replay benchmark's sessions.")
    parser.add_argument("names", nargs="*", help="sessions to record again (default: the "
                        "ones with no JSON file yet)")
    parser.add_argument("--all", action="store_true", help="record every session again")
    args = parser.parse_args(argv)
    known = {spec.name: spec for spec in SESSIONS}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"no session {', '.join(unknown)} (sessions: {', '.join(known)})")
    for spec in SESSIONS:
        path = OUT / f"{spec.name}.json"
        named = args.all or spec.name in args.names
        if not named and (args.names or path.exists()):
            if not args.names:
                print(f"kept {path.relative_to(ROOT)} (name it or pass --all to record it "
                      "again)")
            continue
        path.write_text(json.dumps(play(spec), indent=1, ensure_ascii=False) + "\n", "utf-8")
        print(f"wrote {path.relative_to(ROOT)} ({len(spec.steps)} turns)")


if __name__ == "__main__":
    main()
