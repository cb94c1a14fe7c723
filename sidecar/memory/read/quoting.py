"""Quoting stored text for a prompt: by shape, not by name.

Every chat template and tokenizer family marks its control tokens with brackets or
bars: ``<|eot_id|>``, ``<|im_start|>``, ``<start_of_turn>``, ``<eos>``, ``</s>``,
``[INST]``, ``[TOOL_RESULTS]``, ``<｜User｜>`` (DeepSeek, fullwidth bars),
``<|start_of_role|>``. A list of names is always one model family behind, so stored
text reaches a prompt with *every* such character replaced, whatever it surrounds:

- ``<`` and ``>`` become ``‹`` and ``›``; ``[``, ``]``, ``{``, ``}`` become ``(`` and
  ``)``; ``|`` becomes ``¦``;
- so do their fullwidth, small and vertical presentation forms (every character
  whose NFKC or NFKD form holds one of them: ``＜``, ``﹤``, ``｜``, ``≮`` …) and the
  angle-bracket look-alikes NFKC leaves alone (``〈``, ``⟨``, ``ᐸ``, ``˂`` …): a
  tokenizer that normalises before it matches sees no bracket either;
- invisible characters go: zero-width spaces and joiners, bidi controls, tag
  characters, variation selectors, other format and control characters (so
  ``<`` + ZWJ + ``/memory>`` is one ``‹/memory›``, and nothing hides text);
- whitespace runs become one space: a stored text is one line and never starts a
  line (a turn, a list item) of its own.

Ordinary text stays readable: letters, digits, accents, emoji and punctuation other
than the seven above are kept as stored (no NFKC of the whole text, which would turn
``²`` into ``2``). :func:`quote` is the only function that puts stored text into the
memory block or an LLM prompt.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from types import MappingProxyType

#: What each bracket-like character becomes.
LEFT_ANGLE, RIGHT_ANGLE, BAR = "‹", "›", "¦"
_FOLD_TO = {"<": LEFT_ANGLE, ">": RIGHT_ANGLE, "[": "(", "]": ")", "{": "(", "}": ")", "|": BAR}

#: Characters whose NFKC or NFKD form holds a bracket or a bar (Unicode 14, checked
#: against every code point by the tests), with the one they fold to.
_COMPATIBLE = {
    "\ufe37": "{",  # presentation form for vertical left curly bracket
    "\ufe38": "}",
    "\ufe47": "[",  # presentation form for vertical left square bracket
    "\ufe48": "]",
    "\ufe5b": "{",  # small left curly bracket
    "\ufe5c": "}",
    "\ufe64": "<",  # small less-than sign
    "\ufe65": ">",
    "\uff1c": "<",  # fullwidth less-than sign
    "\uff1e": ">",
    "\uff3b": "[",  # fullwidth left square bracket
    "\uff3d": "]",
    "\uff5b": "{",  # fullwidth left curly bracket
    "\uff5c": "|",  # fullwidth vertical line (DeepSeek's <｜User｜>)
    "\uff5d": "}",
    "\u226e": "<",  # not less-than: NFKD is '<' + U+0338
    "\u226f": ">",
}

#: Look-alikes that no normal form folds: angle brackets, arrowheads, syllabics,
#: and vertical lines that read as a bar.
_LOOK_ALIKES = {
    **dict.fromkeys("\u2039\u2329\u3008\u27e8\u276c\u2770\u29fc\u02c2\u1438\u276e\u2b9c", "<"),
    **dict.fromkeys("\u203a\u232a\u3009\u27e9\u276d\u2771\u29fd\u02c3\u1433\u276f\u2b9e", ">"),
    **dict.fromkeys("\u27e6\u3010\u3014\u3016\u3018\u301a\u2045\uff5f\u2e28", "["),
    **dict.fromkeys("\u27e7\u3011\u3015\u3017\u3019\u301b\u2046\uff60\u2e29", "]"),
    **dict.fromkeys("\u2223\u01c0\u2502\uffe8\u23d0\u2758\u2016\u00a6", "|"),
}

#: Invisible characters outside the format (Cf) and control (Cc) categories that
#: Unicode calls default-ignorable: combining grapheme joiner, Hangul fillers,
#: Khmer inherent vowels, Mongolian selectors, variation selectors.
_IGNORABLE_RANGES = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xE0100, 0xE01EF),
)


def _table() -> Mapping[int, str | None]:
    table: dict[int, str | None] = {}
    for char, plain in {**_COMPATIBLE, **_LOOK_ALIKES, **{c: c for c in _FOLD_TO}}.items():
        table[ord(char)] = _FOLD_TO[plain]
    for first, last in _IGNORABLE_RANGES:
        table.update(dict.fromkeys(range(first, last + 1)))
    return MappingProxyType(table)


#: ``str.translate`` table: each bracket-like character to its quoted form, each
#: ignorable one to nothing (format and control characters are found by category).
QUOTE_TABLE = _table()


def _visible(char: str) -> bool:
    return char.isspace() or unicodedata.category(char) not in ("Cf", "Cc", "Cs", "Co")


def quote(text: str) -> str:
    """``text`` as one line that no template or tokenizer can read as markup."""
    folded = text.translate(QUOTE_TABLE)
    if not folded.isprintable():  # a format, control or other invisible character
        folded = "".join(filter(_visible, folded))
    return " ".join(folded.split())
