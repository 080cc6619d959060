"""Names from a project's description: the folder's slug and the simple recipe's module
name, in ASCII whatever the description's language."""

from __future__ import annotations

import keyword
import re
import sys
import unicodedata

_FILLER = frozenset({"a", "an", "the", "with", "and", "or", "for", "of", "to", "in", "on",
                     "that", "which", "using", "from", "by", "into", "my", "some",
                     # Portuguese, the seed's user's language ("uma API de gestão de preços")
                     "um", "uma", "uns", "umas", "o", "os", "as", "de", "do", "da", "dos",
                     "das", "com", "para", "por", "em", "no", "na", "nos", "nas", "que", "e",
                     "ou", "meu", "minha", "usando"})
"""Words a slug loses first when the whole description does not fit."""


_UNDECOMPOSED = str.maketrans({"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "ł": "l", "đ": "d",
                               "ð": "d", "þ": "th", "ı": "i", "ħ": "h", "ŋ": "ng"})
"""Latin letters that Unicode does not decompose into a base letter and an accent."""


def _words(text: str) -> list[str]:
    """The lowercase ASCII words of ``text``: accents dropped ("preços" is ``precos``), any
    other character a separator (a dash, an arrow, a CJK character: "price—list" is two
    words, which dropping them glued into ``pricelist``)."""
    folded = unicodedata.normalize("NFKD", text.lower().translate(_UNDECOMPOSED))
    kept = "".join(c for c in folded if not unicodedata.combining(c))
    return re.findall(r"[a-z0-9]+", kept)


def slugify(description: str, limit: int = 40) -> str:
    """A directory name from a description: lowercase words joined by hyphens, at most
    ``limit`` characters. When all the words do not fit, the filler words (:data:`_FILLER`) go
    first, then whole words from the end; a first word longer than ``limit`` is cut. Accented
    letters lose their accents ("gestão de preços" is ``gestao-de-precos``, where it was
    ``gest-o-de-pre-os``); a description with no Latin letter or digit gives ``new-project``."""
    words = _words(description)
    if not words:
        return "new-project"
    if len("-".join(words)) > limit:
        # Cutting at the limit alone kept "with" and dropped "tests" ("a CLI todo app with tests").
        words = [w for w in words if w not in _FILLER] or words
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > limit:
            break
        slug = candidate
    return slug or words[0][:limit]


_TESTS_CLAUSE = re.compile(r"""[\s,;]* \b(?:with|including|plus|com|incluindo|e) \s+
                               (?:\w+\s+)?  # ", with unit"
                               (?:tests?(?:\s+suite)?  # English; Portuguese puts the adjective
                                |testes?(?:\s+(?:unit[aá]rios|automatizados|automáticos))?)
                               \s* (?:$|[,.;:!(]|\b(?:and|or|e|ou)\b)  # ends: not "test data"
                               .*""", re.IGNORECASE | re.DOTALL | re.VERBOSE)
"""A clause asking for tests ("with tests", ", including unit tests.", "com testes
unitários"), and all after it."""


def module_name(description: str) -> str:
    """The simple recipe's Python module name for ``description``: its slug as an
    identifier (without a clause asking for tests, :data:`_TESTS_CLAUSE`, and without filler
    words, :data:`_FILLER`, unless nothing else is left), prefixed with
    ``project_`` where the slug could not be imported as itself (a leading digit, a keyword,
    a standard-library module it would shadow)."""
    # "with tests" tells the agent what to write; it names nothing the module holds
    # ("a CLI todo app with tests" gave cli_todo_app_tests.py). Nor do filler words, even
    # where they would fit ("a CLI that counts words" made a_cli_that_counts_words.py).
    text = _TESTS_CLAUSE.sub("", description) or description
    words = [w for w in _words(text) if w not in _FILLER]
    name = slugify(" ".join(words) or text, 24).replace("-", "_")
    if not name.isidentifier() or keyword.iskeyword(name) or name in sys.stdlib_module_names:
        return f"project_{name}"
    return name
