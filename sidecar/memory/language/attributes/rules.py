"""The building blocks of an attribute's declaration: how a rule reads a fact, and
how a value is written.

A fact is written about "User" (the extractor's form): "User lives in Phoenix",
"User's sister works at Siemens", "User's dog is called Biscuit". A rule is a
predicate after a subject:

- :func:`said`: "User" (or "User's <owner>"), adverbs and auxiliaries, then the
  predicate ("User has finally moved to Leeds");
- :func:`owned`: "User's [<owner>'s] [new|work|...] " then the predicate ("User's
  sister's flat is in Leeds");
- :func:`in_passing`: the predicate anywhere after "User" in the same clause ("User
  moved out, renting a studio in Manchester now");
- :func:`flag`: a yes/no attribute: the value is the polarity, named;
- :func:`exact`: a pattern of its own (a value before the subject: "Phoenix is
  where User lives");
- :func:`loose`: a pattern anywhere in the text, after every other rule, with a
  fixed value ("No booze for User") or the match itself (an e-mail address).

Each rule has a **priority**: every attribute's rules are tried together, lowest
first, and the first that matches sets the slot — so "User is a vegan chef" is
read by whichever rule the declarations rank first, not by the order files are
read in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sidecar.memory.language.slot_words import NOT_OCCUPATIONS, UNIT_NAMES

#: "User", then adverbs and auxiliaries; ``owner`` when it is "User's <owner>".
SUBJECT = (
    r"\bUser(?:\s+and\s+others)?(?:['’]s\s+(?P<owner>(?:best\s+|younger\s+|older\s+|little\s+|big\s+)?"
    r"[a-z]+))?"
    r"(?:\s+(?:currently|now|still|also|finally|just|recently|officially|actually|"
    r"really|has|have|had|been|is|was|will|be|no\s+longer|not|never|does|did|"
    r"usually|always|severely|very|extremely|deathly|mildly|badly|slightly|so|super|"
    r"seriously|totally|honestly|genuinely|technically|basically|proudly))*\s+"
)
#: "User's favourite food is", "User's sister's name is": an attribute of the user's.
POSSESSIVE = (
    r"\bUser['’]s\s+(?:(?P<owner>[a-z]+)['’]s\s+)?"
    r"(?:(?:work|personal|home|private|new|old|main|current|real|full|own|first)\s+)?"
)
#: "User", then anything up to a word in the same clause (for facts said in passing).
IN_PASSING = r"\bUser\b[^.;]*?\b"
#: A person named with a title ("Dr. Hartley").
TITLED = r"(?:(?:dr|mr|mrs|ms|prof)\.?\s+)?"
#: A body weight's unit.
WEIGHT_UNIT = r"(?:kg|kgs|kilos?|kilograms?|lbs?|pounds|stone|st)\b"
#: A value: up to four words, cut at punctuation.
VALUE = r"(?P<value>[^\s,.;:!?()]+(?:\s+[^\s,.;:!?()]+){0,3})"
#: "quit smoking", "gave up drinking": the verb before a yes/no attribute.
GIVE_UP = (
    r"(?:(?:quit|stopped|gave\s+up|given\s+up|cut\s+out|started|starting|began|"
    r"resumed)\s+)?"
)


@dataclass(frozen=True, slots=True)
class Rule:
    """One way a fact states an attribute."""

    #: Rules of every attribute are tried lowest first; the first match wins.
    priority: int
    pattern: re.Pattern[str]
    #: Yes/no attributes: the values for the fact and for its negation.
    flag: tuple[str, str] | None = None
    #: A loose rule (tried after all others, no subject): its value, or None for
    #: the matched text itself.
    loose: bool = False
    fixed: str | None = None


def said(priority: int, predicate: str) -> Rule:
    """``predicate`` after the subject ("User [has finally] <predicate>")."""
    return Rule(priority, re.compile(SUBJECT + predicate, re.IGNORECASE))


def owned(priority: int, predicate: str) -> Rule:
    """``predicate`` after a possessive ("User's [sister's] [new] <predicate>")."""
    return Rule(priority, re.compile(POSSESSIVE + predicate, re.IGNORECASE))


def in_passing(priority: int, predicate: str) -> Rule:
    """``predicate`` anywhere after "User" in the same clause."""
    return Rule(priority, re.compile(IN_PASSING + predicate, re.IGNORECASE))


def flag(priority: int, predicate: str, values: tuple[str, str] = ("yes", "no")) -> Rule:
    """A yes/no attribute after the subject: ``values`` for the fact and its negation."""
    return Rule(priority, re.compile(SUBJECT + predicate, re.IGNORECASE), flag=values)


def exact(
    priority: int, pattern: str, flags: int = 0, *, values: tuple[str, str] | None = None
) -> Rule:
    """A pattern of its own (it names ``value``, and ``owner`` where there is one)."""
    return Rule(priority, re.compile(pattern, flags), flag=values)


def loose(priority: int, pattern: str, value: str | None = None) -> Rule:
    """A pattern anywhere in the text, tried after every other rule: ``value``, or
    the matched text (lower-cased)."""
    return Rule(priority, re.compile(pattern, re.IGNORECASE), loose=True, fixed=value)


# -- how a value is written ------------------------------------------------------------

_UNIT_WORDS = "|".join(sorted((re.escape(u) for u in UNIT_NAMES), key=len, reverse=True))
_UNIT = re.compile(rf"(?<=\d)(?:{_UNIT_WORDS})(?![a-z])")


def digits(value: str, raw: str) -> str | None:
    """A phone number: its digits."""
    return re.sub(r"\D", "", raw)


def measure(value: str, raw: str) -> str | None:
    """A measure with its unit written one way ("90 kilos" is "90kg", 6ft2in 6ft2)."""
    return _UNIT.sub(lambda m: UNIT_NAMES[m.group(0)], value.replace(" ", "")).removesuffix("in")


#: Words that make any noun after them a job: a "full-time baker" bakes for a living.
_EMPLOYED = frozenset("full-time part-time professional freelance self-employed".split())


def head_noun(value: str, raw: str) -> str | None:
    """An occupation: its head noun ("registered nurse" is a nurse); None when the
    noun is no occupation ("User is a big fan")."""
    employed = bool(_EMPLOYED & set(raw.lower().split()))
    if not value and employed:
        value = raw.lower().split()[-1]  # "full-time" ends a value elsewhere
    if not value:
        return value
    head = value.split()[-1]
    if head in NOT_OCCUPATIONS and not employed:
        return None
    return head
