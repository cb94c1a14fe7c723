"""Word lists and patterns more than one rule module reads, each written once.

The rule modules (:mod:`.facts`, :mod:`.slots`, :mod:`.heuristics`, :mod:`.when`,
:mod:`.entities`, :mod:`.ambiguity`, the write evaluation's scorer) build their own
patterns and sets from these, so a word added here reaches every rule that reads
the list.
"""

from __future__ import annotations

import re

#: The days of the week, lower-case, Monday first.
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
#: The months, as written in a date ("November 14").
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December",
)  # fmt: skip
#: Weekday and month names, lower-case.
CALENDAR_WORDS = (*WEEKDAYS, *(month.lower() for month in MONTHS))

#: Irregular past forms: never conjugated ("I had" -> "User had"), and a past and a
#: present form of one verb are different facts ("went" is not "goes").
IRREGULAR_PAST = frozenset(
    """was were had did went got made took said saw came left felt knew thought told
    gave found became began bought brought built caught chose drove ate fell flew
    forgot grew heard held hurt kept lost met paid put ran rode sold sent sat slept
    spoke spent stood stole swam taught tore threw understood woke won wore wrote
    broke fought led meant sang shot drank drew hid rang rose shook stuck swore
    quit""".split()
)
#: Past forms that are present forms too: where a tense must be chosen, present
#: ("I hurt myself" -> "User hurts themselves").
SAME_IN_PRESENT = frozenset({"hurt", "put"})

#: The user's parents and partner: people of whom one has one at a time.
PARENTS = ("mum", "mom", "mother", "dad", "father")
PARTNERS = ("wife", "husband", "partner", "spouse", "boyfriend", "girlfriend", "fiance", "fiancee")
#: The rest of the family, and the people around the user.
FAMILY = (
    "parent", "parents", "brother", "sister", "sibling", "son", "daughter", "kid", "kids",
    "child", "children", "baby", "nan", "gran", "grandma", "grandpa", "granddad",
    "grandmother", "grandfather", "aunt", "uncle", "cousin", "niece", "nephew",
)  # fmt: skip
ACQUAINTANCES = (
    "friend", "friends", "neighbour", "neighbor", "colleague", "coworker", "boss", "manager",
    "flatmate", "roommate", "housemate", "teacher", "doctor",
)  # fmt: skip

#: A word: letters and digits, with an apostrophe inside ("User's", "don’t").
WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)

#: An e-mail address.
EMAIL_ADDRESS = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
EMAIL_PATTERN = re.compile(EMAIL_ADDRESS)

#: Words that negate what follows, and the stopping verbs that negate a habit.
NEGATORS = ("not", "no", "never", "cannot")
NOTHING_WORDS = ("none", "nobody", "nothing", "neither", "nor", "without")
STOPPED = ("no\\s+longer", "any\\s?more", "quit", "quitted", "stopped", "gave\\s+up")
#: A contracted "not" ("don't", "isn’t").
CONTRACTED_NOT = r"n['’]t\b"


def negation(*words: str, after: str = "") -> re.Pattern[str]:
    """A case-blind pattern for any of ``words`` as whole words, a contracted "not",
    and ``after`` (a further alternative, e.g. ``-free\\b``)."""
    tail = f"|{after}" if after else ""
    return re.compile(rf"\b(?:{'|'.join(words)})\b|{CONTRACTED_NOT}{tail}", re.IGNORECASE)
