"""Named entities of a memory's text, for entity links.

"User's sister is Ana." and "Ana lives in Porto." share no content word with
"Where does my sister live?" beyond *live*, and their vectors are not close; what
ties them is the name. :func:`names` reads the proper names a text mentions —
runs of capitalised words ("Helix Labs", "Nissan Leaf", "Okafor" from "Dr.
Okafor"), without titles, articles or the user — so the write path can link
memories that name the same entity (:mod:`sidecar.memory.write.rows.enrich`), and link
expansion on the read path can bridge from one to the other.

Rules, not a tagger. A capitalised word that opens a sentence on its own counts
only when a verb follows it ("Ana lives…", "Rio can…"), so "Went to Paris.",
"Glad to hear it!" and "Sounds great" name Paris and nothing. Contractions
("You're") and sentence openers ahead of a name ("Yeah Mel") are dropped, and a run
never crosses a sentence end. A wrong name costs at most a link between two
memories that mention it; names that many of an owner's memories carry (a speaker's
name in a transcript) are left out by the caller.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from sidecar.memory.language.lexicon import CALENDAR_WORDS
from sidecar.memory.language.text import STOPWORDS

#: A run of capitalised words (letters, digits, apostrophes, hyphens and dots inside
#: a word: "Dr.", "O'Neil", "MT-07"), on one line.
_RUN = re.compile(r"[A-Z][\w'’.\-]*(?:[ \t]+[A-Z][\w'’.\-]*)*")
_NEXT_WORD = re.compile(r"['’]?s?[ \t]+([a-z]+)")
_CONTRACTION = re.compile(r"['’](?:re|ve|ll|d|m|t)$|n['’]t$", re.IGNORECASE)
#: Verbs that follow a subject in their plain form.
_VERBS = frozenset(
    """is was are were has had have can could will would may might must should does did
    do just also still never always recently now loves likes used got""".split()
)
_SENTENCE_END = (".", "!", "?", ":", ";", "\n", '"', "“", "(")
#: Titles and articles that open a name without being part of it.
_LEADING = frozenset(
    """the a an mr mr. mrs mrs. ms ms. dr dr. prof prof. professor sir dame aunt uncle
    saint st st. my our your his her their""".split()
)
#: Capitalised words that never name anything on their own.
_NEVER = frozenset(
    """user user's i i'm i've i'd i'll ok okay yes no hi hey hello thanks thank please
    today tomorrow yesterday""".split()
) | frozenset(CALENDAR_WORDS)
#: Ordinary words that open sentences: as a sentence's first word they name nothing.
_OPENERS = STOPWORDS | frozenset(
    """also just really actually maybe well so then now still yeah yep nope oh wow
    lol haha sure great good nice cool love like loves likes got had went made took
    said saw came left felt knew thought told gave found became began bought brought
    built caught chose drove ate fell flew forgot grew heard held met paid ran rode
    sold sent sat slept spoke spent stood swam taught wore wrote broke quit can't
    don't didn't won't isn't wasn't it's that's there's what's let's never ever
    one two three four five six seven eight nine ten eleven twelve twenty thirty
    hundred thousand first second third last next few several many most some every
    each both half another other""".split()
)
#: What a sentence's first words are dropped for: openers, and words that are never names.
_NOT_OPENING_NAMES = _OPENERS | _NEVER


def names(text: str) -> frozenset[str]:
    """The proper names ``text`` mentions, as written (case kept: "Pixel" the cat is
    not "pixel art"), possessives and surrounding punctuation dropped."""
    return _names(text, _RUN.finditer(text))


def _names(text: str, matches: Iterable[re.Match[str]]) -> frozenset[str]:
    """The names of these runs of capitalised words of ``text``."""
    found: set[str] = set()
    for match in matches:
        opens_sentence = _opens_sentence(text, match.start())
        for run, end in _runs(match.group(0), match.start()):
            words = [_bare(w) for w in run]
            if opens_sentence:
                while words and words[0].casefold() in _NOT_OPENING_NAMES:
                    words.pop(0)
            while words and (words[0].casefold() in _LEADING or not words[0]):
                words.pop(0)
                opens_sentence = False
            while words and words[-1].casefold() in _LEADING:
                words.pop()
            words = [w for w in words if w.casefold() not in _NEVER and not _CONTRACTION.search(w)]
            if not words or (len(words) == 1 and len(words[0]) < 2):
                opens_sentence = True
                continue
            if (
                len(words) == 1
                and opens_sentence
                and len(run) == 1
                and (_ordinary(words[0]) or not _verb_follows(text, end))
            ):
                opens_sentence = True
                continue
            found.add(" ".join(words))
            opens_sentence = True  # the next run of this match follows a sentence end
    return frozenset(found)


def _ordinary(word: str) -> bool:
    """A sentence's first word that reads as an ordinary word, not a name: a verb or
    adverb form ("Switched", "Living", "Really")."""
    return len(word) > 4 and word.casefold().endswith(("ing", "ed", "ly"))


def _runs(run: str, start: int) -> list[tuple[list[str], int]]:
    """``run``'s words split where a word ends a sentence ("Melanie. It" is two runs;
    "Dr. Okafor" one), each with the text offset where it ends."""
    out: list[tuple[list[str], int]] = []
    current: list[str] = []
    offset = start
    for piece in re.finditer(r"\S+", run):
        word = piece.group(0)
        current.append(word)
        offset = start + piece.end()
        if word.endswith(".") and word.casefold() not in _LEADING and len(word) > 2:
            out.append((current, offset))
            current = []
    if current:
        out.append((current, offset))
    return out


def _verb_follows(text: str, end: int) -> bool:
    """Whether the word after ``end`` reads as the verb of a sentence whose subject is
    the capitalised word before it ("Ana lives", "Rio can", "Priya is")."""
    match = _NEXT_WORD.match(text, end)
    if match is None:
        return False
    word = match.group(1)
    return word in _VERBS or (
        len(word) > 3 and (word.endswith("ed") or (word.endswith("s") and not word.endswith("ss")))
    )


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` as a whole word run ("Ana" is not in
    "Anastasia")."""
    start = text.find(name)
    while start >= 0:
        end = start + len(name)
        before = text[start - 1] if start > 0 else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        start = text.find(name, start + 1)
    return False


def _bare(word: str) -> str:
    """A word without a possessive ending or trailing punctuation ("Ana's" -> "Ana",
    "Labs." -> "Labs"); a title's dot is kept for the title check ("Dr.")."""
    for suffix in ("'s", "’s", "'", "’"):
        if word.endswith(suffix):
            word = word[: -len(suffix)]
            break
    if word.casefold() in _LEADING:
        return word
    return word.rstrip(".-")


def _opens_sentence(text: str, start: int) -> bool:
    """Whether ``start`` begins the text or follows a sentence end (spaces and tabs
    between). Read backwards from ``start``: no copy of the text before it, which
    made a long text with many names quadratic."""
    i = start - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    return i < 0 or text[i] in _SENTENCE_END


def is_user_fact(text: str) -> bool:
    """Whether ``text`` is a fact about the user as the write path words them
    ("User …", "User's …"), rather than about someone or something else."""
    return text.startswith(("User ", "User's ", "User’s "))


#: The user as the write path names them, anywhere in a fact.
_USER = re.compile(r"(?<![\w-])User(?![\w-])")


def names_user(text: str) -> bool:
    """Whether ``text`` speaks of the user at all ("User …", "In Rome, User wants
    to …", "Ana, User's sister, …"), as a fact about someone or something else
    ("Piotr retired from teaching maths.") does not."""
    return _USER.search(text) is not None


#: A transcript line's speaker: "Melanie: …" (one to three capitalised words, a colon).
_SPEAKER = re.compile(r"([A-Z][\w'’.\-]*(?:[ \t][A-Z][\w'’.\-]*){0,2}):[ \t]")


#: A transcript line's speaker, any case ("user: …", "Melanie: …"): one to three words.
_SAID_BY = re.compile(r"([^\W\d_][\w'’.\-]*(?:[ \t][^\W\d_][\w'’.\-]*){0,2}):[ \t]")


def speaker(text: str) -> str | None:
    """Who said ``text``, when it is a transcript line ("melanie" of "Melanie: we
    went camping", "assistant" of "assistant: Sure ..."), lower case; None for
    anything else (a fact, a note)."""
    said = _SAID_BY.match(text)
    return said.group(1).lower() if said is not None else None


def subject(text: str) -> str | None:
    """Whom ``text`` is about: a transcript line's speaker ("Melanie" of "Melanie: we
    went camping"), else the proper name it opens with (:func:`named_subject`); None
    for a fact about the user and for text that names no subject."""
    speaker = _SPEAKER.match(text)
    if speaker is not None and speaker.group(1).lower() not in _NEVER | STOPWORDS:
        return speaker.group(1)
    return named_subject(text)


def named_subject(text: str) -> str | None:
    """The proper name ``text`` opens with as its subject ("Ana" of "Ana lives in
    Porto."; "Helix Labs" of "Helix Labs is based in Rotterdam."), if any."""
    if _RUN.match(text) is None:
        return None
    # A name the text opens with starts with its first two letters: only the runs
    # that hold them are read, not every name of a long text.
    head = text[:2]
    runs = (m for m in _RUN.finditer(text) if head in m.group(0))
    found = [n for n in _names(text, runs) if text.startswith(n)]
    return max(found, key=len) if found else None
