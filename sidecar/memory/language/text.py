"""Text normalisation for lexical matching: tokens, stems and character n-grams.

Deliberately small and dependency-free: lower-cased Unicode word tokens, an English
stop list, a light suffix-stripping stemmer (so "groups"/"group", "painted"/"paint"
match), and character trigrams for fuzzy matching of names and typos.
"""

from __future__ import annotations

import re
import unicodedata

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves user user's""".split()
)

_SUFFIXES = ("ingly", "edly", "ings", "ing", "ied", "ies", "ed", "es", "ly", "s")


def stem(word: str) -> str:
    """A light English stemmer: strips one common inflectional suffix."""
    if len(word) <= 3 or not word.isalpha():
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            base = word[: -len(suffix)]
            if suffix in ("ies", "ied"):
                return base + "y"
            if suffix == "es" and not base.endswith(("s", "x", "z", "ch", "sh")):
                return base + "e"
            if suffix == "s" and base.endswith(("s", "u")):
                return word  # "class", "bus"
            return base
    return word


def normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def tokens(text: str) -> list[str]:
    """Stemmed content tokens of ``text`` (stop words dropped)."""
    # Most words end in no suffix and are their own stem: one C-level check each
    # instead of a call that tries every suffix (the same tokens, a third the time).
    return [
        stem(t) if t.endswith(_SUFFIXES) and len(t) > 3 else t
        for t in _TOKEN.findall(normalize(text))
        if t not in STOPWORDS
    ]


def char_ngrams(text: str, n: int = 3) -> frozenset[str]:
    """Character n-grams of the normalised text (whitespace collapsed, padded)."""
    collapsed = " " + " ".join(_TOKEN.findall(normalize(text))) + " "
    if len(collapsed) < n:
        return frozenset({collapsed})
    return frozenset(collapsed[i : i + n] for i in range(len(collapsed) - n + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_unicode(text: str) -> str:
    """``text`` with surrogate pairs joined and lone surrogates replaced by U+FFFD
    (so it always encodes as UTF-8)."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
