"""Subject-attribute slots: which attribute of the user (or of someone or something of
the user's) a fact sets, and to what value.

A fact is written about "User" (the extractor's form): "User lives in Phoenix",
"User's sister works at Siemens", "User's dog is called Biscuit". The subject is
"User" or "User's <owner>" (sister, dog, partner, ...); the predicate names the
attribute; the value is the phrase after it, cut at punctuation or a function word:

====================  ==========================================  =============
attribute             predicates                                  values
====================  ==========================================  =============
residence             lives / is based / settled / moved ... in   single
employer              works / is employed ... at, for; joined     single
occupation            works as; is a <profession>                 single
name                  is called / named / goes by / name is       single
diet                  is vegetarian / vegan ...; eats meat        single
alcohol, smoking      drinks alcohol / booze; smokes              single, yes/no
favorite:<thing>      favourite <thing> is                        single
phone, email          phone number is; an e-mail address          single
birthday, age         birthday is; was born on; is N years old    single
car, team             drives; supports / is a fan of              single
workplace, bedtime    works from home; in the office; goes to     single
                      bed at / lights out at
native language       native language / mother tongue is          single
language              speaks                                      accumulates
allergy               is allergic to; has a <x> allergy           accumulates
hobby                 plays; hobby is                             accumulates
pets                  has a dog / cat ...                         accumulates
====================  ==========================================  =============

A negated fact keeps its slot with the value negated ("User no longer lives in
Minneapolis": residence = "not minneapolis"); yes/no attributes fold the polarity
into the value. A single-valued slot set to another value is a contradiction; an
accumulating one is not. Anything the table does not cover has no slot, and the
write path treats it by its words alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sidecar.memory.model.slot_words import (
    ALIASES,
    ATTRIBUTES,
    DIETS,
    NOT_OCCUPATIONS,
    NUMBER_WORDS,
    OCCUPATION_HEAD,
    PETS,
    PROFESSIONS,
    RELATIONS,
    SINGLE_RELATIONS,
    THINGS,
    UNIT_NAMES,
    VALUE_STOP,
)
from sidecar.memory.model.text import STOPWORDS

_SUBJECT = (
    r"\bUser(?:\s+and\s+others)?(?:['’]s\s+(?P<owner>(?:best\s+|younger\s+|older\s+|little\s+|big\s+)?"
    r"[a-z]+))?"
    r"(?:\s+(?:currently|now|still|also|finally|just|recently|officially|actually|"
    r"really|has|have|had|been|is|was|will|be|no\s+longer|not|never|does|did|"
    r"usually|always|severely|very|extremely|deathly|mildly|badly|slightly|so|super|"
    r"seriously|totally|honestly|genuinely|technically|basically|proudly))*\s+"
)
#: "User's favourite food is", "User's sister's name is": an attribute of the user's.
_POSSESSIVE = (
    r"\bUser['’]s\s+(?:(?P<owner>[a-z]+)['’]s\s+)?"
    r"(?:(?:work|personal|home|private|new|old|main|current|real|full|own|first)\s+)?"
)
#: "User", then anything up to a word in the same clause (for facts said in passing).
_IN_PASSING = r"\bUser\b[^.;]*?\b"
#: A person named with a title ("Dr. Hartley").
_TITLED = r"(?:(?:dr|mr|mrs|ms|prof)\.?\s+)?"
#: A body weight's unit.
_WEIGHT_UNIT = r"(?:kg|kgs|kilos?|kilograms?|lbs?|pounds|stone|st)\b"
_VALUE = r"(?P<value>[^\s,.;:!?()]+(?:\s+[^\s,.;:!?()]+){0,3})"
_NEGATION = re.compile(
    r"\b(?:not|no|never|no\s+longer|any\s?more|quit|quitted|stopped|gave\s+up|"
    r"cannot)\b|n['’]t\b|-free\b",
    re.IGNORECASE,
)
#: "quit smoking", "gave up drinking": the verb before a yes/no attribute.
_GIVE_UP = (
    r"(?:(?:quit|stopped|gave\s+up|given\s+up|cut\s+out|started|starting|began|"
    r"resumed)\s+)?"
)
#: Yes/no attributes stated without the subject first ("No booze for User").
LOOSE_FLAGS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "alcohol",
        re.compile(
            r"\b(?:no|zero)\s+(?:alcohol|booze|drinking)\b|\b(?:alcohol|booze)-free\b|"
            r"\b(?:sober|teetotal\w*|tee-total\w*)\b",
            re.IGNORECASE,
        ),
        "no",
    ),
    ("smoking", re.compile(r"\bnon-?smoker\b", re.IGNORECASE), "no"),
    (
        "diet",
        re.compile(r"\b(?:no|zero)\s+meat\b|\bmeat-free\b|\bplant-based\b", re.IGNORECASE),
        "no meat",
    ),
    (
        "smoking",
        re.compile(
            r"\bwithout\s+(?:a\s+(?:single\s+)?)?cigarettes?\b|\bquit\s+smoking\b",
            re.IGNORECASE,
        ),
        "no",
    ),
)


@dataclass(frozen=True, slots=True)
class Slot:
    """The attribute a fact sets (``owner:attribute`` for someone or something of the
    user's), its value, and whether the user may hold several values at once."""

    name: str
    value: str
    accumulates: bool = False


@dataclass(frozen=True, slots=True)
class _Rule:
    attribute: str
    pattern: re.Pattern[str]
    accumulates: bool = False
    #: yes/no attributes: the value is the polarity, named (yes, no).
    flag: tuple[str, str] | None = None


def _rule(
    attribute: str, predicate: str, *, accumulates: bool = False, possessive: bool = False
) -> _Rule:
    subject = _POSSESSIVE if possessive else _SUBJECT
    return _Rule(attribute, re.compile(subject + predicate, re.IGNORECASE), accumulates)


def _in_passing(attribute: str, predicate: str) -> _Rule:
    """A rule for ``predicate`` anywhere after "User" in the same clause ("User moved
    out, renting a studio in Manchester now")."""
    return _Rule(attribute, re.compile(_IN_PASSING + predicate, re.IGNORECASE))


def _flag(attribute: str, predicate: str, values: tuple[str, str] = ("yes", "no")) -> _Rule:
    return _Rule(attribute, re.compile(_SUBJECT + predicate, re.IGNORECASE), flag=values)


RULES: tuple[_Rule, ...] = (
    # Before the relationship rules: "got married and took User's wife's name".
    _rule(
        "attribute",
        r"(?:changed|changing|changes)\s+User['’]s\s+(?P<thing>surname|last\s+name|name)\s+to\s+"
        r"(?P<value>(?-i:[A-Z][\w'’-]+))",
    ),
    _in_passing(
        "surname",
        r"(?:took|taken|taking|takes|kept|keeping)\s+User['’]s\s+"
        r"(?:wife|husband|partner|spouse)['’]s\s+(?:sur|last\s+)?name\b[^.;]*?"
        r"\b(?i:it['’]s|it\s+is|now|to)\s+(?P<value>(?-i:[A-Z][\w'’-]+))",
    ),
    _rule(
        "residence",
        r"(?:lives?|living|lived|resides?|residing|based|settled|moved|moving|relocated|"
        r"relocating|moving\s+back|moved\s+back)\s+(?:in|to|into)\s+(?:a\s+\w+\s+in\s+)?" + _VALUE,
    ),
    _rule("residence", r"(?:home|flat|apartment|house)\s+is\s+in\s+" + _VALUE),
    # "User moved out of User's parents' place, renting a studio in Manchester now"
    _in_passing(
        "residence",
        r"(?:renting|rents|rented|bought|buying|owns)\s+(?:a|an|User['’]s)\s+"
        r"(?:new\s+|little\s+|tiny\s+|small\s+)?(?:studio|flat|apartment|house|place|room|"
        r"condo|bungalow|cottage|terrace)\s+(?:in|near)\s+" + _VALUE,
    ),
    _rule(
        "residence",
        r"(?:lives?|living|lived|stays?|staying)\s+(?:with|w/)\s+(?:User['’]s\s+)?"
        r"(?P<value>parents|family|mum|mom|dad|flatmates?|roommates?|housemates?|"
        r"grandparents|in-laws)\b",
    ),
    _rule("residence", r"(?:stays?|staying)\s+in\s+" + _VALUE),
    _rule(
        "residence",
        r"an?\s+(?:(?-i:[a-z]+)\s+)?(?P<value>(?-i:[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)?))\s+"
        r"(?:resident|local)\b",
    ),
    _Rule(
        "residence",
        re.compile(
            r"^(?P<value>[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)?)\s+is\s+where\s+User\s+"
            r"(?:lives|is\s+based|is\s+living)",
            re.IGNORECASE,
        ),
    ),
    _rule(
        "residence",
        r"(?:new\s+)?(?:home|flat|apartment|house|place)(?:['’]s)?\s+(?:is\s+)?in\s+" + _VALUE,
        possessive=True,
    ),
    _rule(
        "employer",
        r"(?:works?|working|worked|employed|started\s+working|got\s+a\s+job|"
        r"has\s+a\s+job|job)\s+(?:at|for|with)\s+" + _VALUE,
    ),
    _rule(
        "employer",
        r"(?:starts|starting|started|will\s+start|begins|began)\s+at\s+"
        r"(?P<value>(?-i:[A-Z][\w&'’-]*(?:\s+[A-Z][\w&'’-]*){0,2}))",
    ),
    _rule(
        "employer",
        r"(?:started|starting|got|landed|has|have|took|accepted)\s+an?\s+(?:new\s+)?"
        r"(?:job|role|position)\s+(?:at|with)\s+" + _VALUE,
    ),
    _rule("employer", r"(?:joined|joining)\s+(?P<value>[A-Z][\w&'’-]*(?:\s+[A-Z][\w&'’-]*){0,2})"),
    _rule(
        "occupation",
        r"(?:works?|working|worked|starts?|starting|started|employed)\s+as\s+(?:an?\s+)?" + _VALUE,
    ),
    _rule("occupation", r"(?:teaches|teaching|taught)\s+(?P<value>\w+)"),
    _rule(
        "occupation",
        r"(?:training|studying|qualifying|retraining|re-training)\s+(?:to\s+(?:be|become)|as)\s+"
        r"(?:an?\s+)?" + _VALUE,
    ),
    _rule(
        "occupation",
        r"(?:job|profession|occupation)\s+is\s+(?:an?\s+)?" + _VALUE,
        possessive=True,
    ),
    _rule(
        "workplace",
        r"(?:works?|working)\s+(?P<value>from\s+home|remotely|remote|hybrid)\b",
    ),
    _rule("workplace", r"(?:commutes?|commuting)\s+(?:in)?to\s+(?:the\s+office\s+in\s+)?" + _VALUE),
    # "User and others are back in the office four days a week now"
    _rule(
        "workplace",
        r"(?:are\s+|were\s+|goes\s+|going\s+|went\s+)?(?:back\s+)?(?:in|into|to)\s+the\s+"
        r"(?P<value>office)\b",
    ),
    _Rule(
        "name",
        re.compile(
            r"\bUser(?:\s+and\s+others)?\s+(?:has\s+|have\s+)?renamed\s+(?:the|User['’]s)\s+"
            r"(?P<owner>[a-z]+)\b.*?\b(?:to|answers\s+to|called|named)\s+"
            r"(?P<value>[A-Z][\w'’-]*)",
            re.IGNORECASE,
        ),
    ),
    _Rule(
        "name",
        re.compile(
            r"\bUser['’]s\s+(?:little\s+|younger\s+|older\s+|big\s+|eldest\s+|youngest\s+)?"
            rf"(?P<owner>{RELATIONS})(?:['’]s\s+name\s+is|\s+is\s+(?:called|named))\s+"
            r"(?P<value>[A-Z][\w'’-]+)"
        ),
    ),
    _Rule(
        "name",
        re.compile(
            rf"\bUser\s+(?:has|had)\s+an?\s+(?P<owner>{RELATIONS})\s+(?:called|named)\s+"
            r"(?P<value>[A-Z][\w'’-]+)"
        ),
    ),
    _Rule(
        "name",
        re.compile(
            rf"^(?P<value>[A-Z][\w'’-]+)\s+is\s+User['’]s\s+(?P<owner>{RELATIONS})\b"
            r"(?!\s+tongue)"
        ),
    ),
    _Rule(
        "favorite",
        re.compile(
            r"^(?:the\s+)?(?P<value>[\w'’ -]+?)\s+(?:is|has\s+(?:become|overtaken\s+\w+"
            r"(?:\s+\w+)?\s+as))\s+(?:hands\s+down\s+|definitely\s+|easily\s+|now\s+)?"
            r"User['’]s\s+(?:new\s+)?(?:favou?rite|number\s+one|top|go-to|fave)\s+"
            r"(?P<thing>[a-z]+)",
            re.IGNORECASE,
        ),
    ),
    _Rule(
        "favorite",
        re.compile(
            r"^(?:the\s+)?(?P<value>[\w'’ -]+?)\s+is\s+(?:now\s+)?User['’]s\s+(?:new\s+)?"
            r"(?P<thing>colou?r|drink|tipple|snack|dish|meal|food|song|band|film|movie|book|"
            r"sport|season|game)\b",
            re.IGNORECASE,
        ),
    ),
    _Rule(
        "relationship",
        re.compile(
            _SUBJECT + r"(?:broke\s+up|split\s+up|separated|divorced|got\s+divorced)\b",
            re.IGNORECASE,
        ),
        flag=("single", "single"),
    ),
    _rule(
        "diet",
        rf"(?:gone|went|turned|become|became|going|switched\s+to\s+being)\s+"
        rf"(?:fully\s+|completely\s+)?(?P<value>{DIETS})\b",
    ),
    _rule(
        "relationship",
        r"(?:is|got|became|has\s+been)\s+(?:now\s+|officially\s+|happily\s+)?"
        r"(?P<value>single|married|engaged|divorced|separated|widowed)\b",
    ),
    _rule(
        "relationship",
        r"(?:is|has\s+been|started|starting|been)\s+(?:now\s+)?(?P<value>seeing|dating)\s+"
        r"(?=someone|somebody|(?:a|this)\s+(?:guy|girl|man|woman|lad|lass|bloke)\b|"
        r"(?-i:[A-Z]))",
    ),
    _rule(
        "relationship",
        r"(?:girlfriend|boyfriend|partner|wife|husband|fianc[ée]e?|spouse)\s+"
        r"(?:is\s+(?:called\s+|named\s+)?)?(?P<value>[A-Z][\w'’-]+)",
        possessive=True,
    ),
    _rule("occupation", rf"(?:an?\s+)(?P<value>(?:\w+\s+)?(?:{PROFESSIONS}))\b"),
    _rule(
        "occupation",
        rf"(?:is|works\s+as|has\s+been|was)\s+an?\s+(?P<value>(?:[a-z-]+\s+){{0,2}}"
        rf"{OCCUPATION_HEAD})\b(?!\s+(?:of|at\s+heart|in\s+training|fan))",
    ),
    _Rule(
        "name",
        re.compile(
            r"\b(?i:everyone|everybody|people|friends|most\s+people|folks)\s+(?:now\s+)?"
            r"calls?\s+User\s+(?P<value>[A-Z][\w'’-]+)"
        ),
    ),
    _rule(
        "name",
        r"(?:is\s+called|called|named|goes\s+by|prefers\s+to\s+be\s+called|"
        r"wants\s+to\s+be\s+called|likes\s+to\s+be\s+called)\s+(?P<value>[\w'’-]+)",
    ),
    _rule("name", r"(?:nick)?name\s+is\s+(?P<value>[\w'’-]+)", possessive=True),
    _rule(
        "diet",
        rf"(?:an?\s+)?(?:strict(?:ly)?\s+|full(?:y)?\s+|mostly\s+)?(?P<value>{DIETS})\b",
    ),
    # Meat as such: not eating pork is not not eating beef (both hold, two facts).
    _flag(
        "diet",
        _GIVE_UP + r"(?:eats?|eating|ate)\s+(?:any\s+)?meat\b",
        ("meat eater", "no meat"),
    ),
    # "User started eating fish again, so pescatarian now"
    _in_passing(
        "diet",
        rf"(?:so|now|basically|officially|technically)\s+(?:an?\s+)?"
        rf"(?P<value>{DIETS})\b",
    ),
    # "User goes to bed around 11pm", "User's new routine is lights out at 9:30"
    _in_passing(
        "bedtime",
        r"(?:(?:goes|go|going|gets|get|went)\s+to\s+(?:bed|sleep)|"
        r"lights\s+out|bedtime|asleep|in\s+bed)\s+(?:is\s+)?(?:at|around|by|about|before)\s+"
        r"(?:about\s+|around\s+)?(?P<value>\d{1,2}(?:[:.]\d{2})?\s*(?:am|pm)?|midnight)",
    ),
    _flag(
        "alcohol",
        _GIVE_UP + r"(?:drinks?|drinking|drank|touches?)\s+(?:any\s+|an?\s+(?:\w+\s+)?"
        r"(?:glass|pint|bottle|can|drop)\s+of\s+)?"
        r"(?:alcohol|booze|beer|wine|spirits|liquor)\b",
    ),
    _flag("smoking", _GIVE_UP + r"(?:smokes?|smoking|smoked|(?:a\s+)?smoker)\b"),
    _flag("vaping", _GIVE_UP + r"(?:vapes?|vaping|vaped|(?:a\s+)?vaper)\b"),
    _rule(
        "favorite",
        r"(?:favou?rite|fave)\s+(?P<thing>[a-z]+(?:\s+[a-z]+)?)\s+is\s+(?:a\s+|the\s+)?" + _VALUE,
        possessive=True,
    ),
    _rule(
        "phone",
        r"(?:(?:new\s+)?(?:phone|mobile|cell)(?:\s+number)?|(?:new\s+)?number)(?:\s+is|:)\s+"
        r"(?P<value>[+\d][\d ()./-]{5,}\d)",
        possessive=True,
    ),
    _rule(
        "email",
        r"(?:e-?mail(?:\s+address)?)\s+is\s+(?P<value>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)",
        possessive=True,
    ),
    _rule(
        "birthday",
        r"(?:birthday|b-?day)(?:['’]s)?\s+(?:is|falls)\s+(?:on\s+|in\s+)?" + _VALUE,
        possessive=True,
    ),
    # Dates are canonical here ("November 14", :mod:`sidecar.memory.model.dates`).
    _Rule(
        "birthday",
        re.compile(r"^(?P<value>[A-Z][a-z]+ \d{1,2})\s+is\s+User['’]s\s+(?:birthday|b-?day)\b"),
    ),
    _Rule(
        "birthday",
        re.compile(
            r"\bUser\s+celebrates\s+User['’]s\s+birthday\s+on\s+(?P<value>[A-Z][a-z]+ \d{1,2})"
        ),
    ),
    _rule(
        "attribute",
        rf"(?P<thing>{ATTRIBUTES})\s+(?:is|are)\s+(?:now\s+)?{_TITLED}" + _VALUE,
        possessive=True,
    ),
    _rule(
        "attribute",
        rf"(?:switched|moved|changed)\s+to\s+(?:a\s+)?(?:new\s+)?(?P<thing>{ATTRIBUTES})"
        rf"[,:]?\s+{_TITLED}" + _VALUE,
    ),
    _rule("birthday", r"was\s+born\s+(?:on\s+|in\s+)?" + _VALUE),
    _rule(
        "age",
        r"(?:is|turned|turns|just\s+turned)\s+(?P<value>\d{1,3})"
        r"(?:\s+years?\s+old\b|\s*(?=[,;.!?]?\s*$|[,;!?]|\.(?!\d)|\s+(?:now|today|yesterday|"
        r"tomorrow|this|last|next|in|on|at|and|but|so|soon|already|recently|earlier|the)\b))",
    ),
    _rule(
        "weight",
        r"(?:weighs?|weighing|weighed|is\s+(?:now\s+)?(?:down|up)\s+to|is\s+(?:now\s+)?at|"
        r"got\s+(?:down|up)\s+to)\s+(?:about\s+|around\s+|roughly\s+|just\s+(?:under|over)\s+)?"
        rf"(?P<value>\d+(?:\.\d+)?\s*{_WEIGHT_UNIT})",
    ),
    _rule(
        "height",
        r"(?:is|stands)\s+(?:about\s+|around\s+|roughly\s+)?"
        r"(?P<value>\d(?:\.\d+)?\s*m(?:etres?|eters?)?|\d{2,3}\s*cm|"
        r"\d\s*(?:foot|feet|ft|')(?:\s*\d{1,2}(?:\s*(?:inches|in|\"))?)?)"
        r"(?:\s+tall)?(?!\w|\.\d)",
    ),
    _rule("car", r"(?:drives|driving)\s+(?:an?\s+|the\s+)?" + _VALUE),
    _rule("car", r"car\s+is\s+(?:an?\s+|the\s+)?" + _VALUE, possessive=True),
    _rule(
        "team",
        r"(?:is\s+an?\s+)(?:huge\s+|big\s+|massive\s+|die-hard\s+)?"
        r"(?P<value>(?:[A-Z][\w'’.-]*\s+){1,3})(?:fan|supporter)\b",
    ),
    _rule(
        "team",
        r"(?:supports|supporting|roots\s+for|cheers\s+(?:for|on)|is\s+a\s+fan\s+of|follows)\s+"
        r"(?:the\s+)?" + _VALUE,
    ),
    _rule(
        "native language",
        r"(?:native\s+language|mother\s+tongue|first\s+language)\s+is\s+" + _VALUE,
        possessive=True,
    ),
    _Rule(
        "native language",
        re.compile(
            r"^(?P<value>[A-Z][\w'’-]*?)(?:['’]s)?\s+is\s+User['’]s\s+"
            r"(?:native\s+language|mother\s+tongue|first\s+language)\b"
        ),
    ),
    _rule("language", r"(?:speaks?|speaking)\s+(?:fluent\s+)?" + _VALUE, accumulates=True),
    _rule("allergy", r"(?:is\s+)?allergic\s+to\s+" + _VALUE, accumulates=True),
    _rule(
        "allergy",
        r"(?:has|have|got|suffers?\s+from)\s+(?:an?\s+)?(?:severe\s+|bad\s+|mild\s+)?"
        r"allergy\s+to\s+(?P<value>\w+)",
        accumulates=True,
    ),
    _rule(
        "allergy",
        r"(?:has|have|got|suffers?\s+from)\s+(?:an?\s+)?(?:severe\s+|bad\s+|mild\s+)?"
        r"(?P<value>\w+)\s+allergy\b",
        accumulates=True,
    ),
    _rule("allergy", r"(?:is\s+)?(?P<value>\w+)[- ]allergic\b", accumulates=True),
    _rule("allergy", r"(?P<value>\w+)\s+allergy\s+is\b", accumulates=True, possessive=True),
    _rule("hobby", r"(?:plays|playing)\s+(?:the\s+)?" + _VALUE, accumulates=True),
    _rule(
        "hobby",
        r"(?:is\s+)?(?:really\s+|very\s+|super\s+)?(?:into|taken\s+up|took\s+up|"
        r"taking\s+up)\s+" + _VALUE,
        accumulates=True,
    ),
    _rule("hobby", r"hobby\s+is\s+" + _VALUE, accumulates=True, possessive=True),
    _rule(
        "pets",
        rf"(?:has|owns|got|adopted)\s+(?:an?\s+|{NUMBER_WORDS}\s+)(?P<value>{PETS})s?\b",
        accumulates=True,
    ),
)

_UNIT_WORDS = "|".join(sorted((re.escape(u) for u in UNIT_NAMES), key=len, reverse=True))
_UNIT = re.compile(rf"(?<=\d)(?:{_UNIT_WORDS})(?![a-z])")
#: Attributes whose values are measures with a unit.
_MEASURED = frozenset({"weight", "height"})
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_ARTICLES = frozenset({"a", "an", "the", "user's", "users", "my", "his", "her", "their"})
_KEEP_INSIDE = frozenset({"of", "de", "la", "le", "del", "von", "van", "and"})


def _clean_value(raw: str) -> str:
    words = [w for w in raw.replace("’", "'").lower().split() if w]
    while words and words[0] in _ARTICLES:
        words.pop(0)
    kept: list[str] = []
    for word in words:
        if (word in STOPWORDS and not (kept and word in _KEEP_INSIDE)) or word in VALUE_STOP:
            break
        kept.append(word.rstrip("'"))
    while kept and kept[-1] in _KEEP_INSIDE:
        kept.pop()
    return " ".join(kept)


#: Values of one slot that can both be true ("no meat" and "pescatarian").
_COMPATIBLE: dict[str, tuple[frozenset[str], ...]] = {
    "diet": (frozenset({"no meat", "vegetarian", "vegan", "pescatarian"}),),
}


def compatible(slot: str, a: str | None, b: str | None) -> bool:
    """Whether two different values of ``slot`` can hold at once (one is a looser
    statement of the other)."""
    groups = _COMPATIBLE.get(slot.rsplit(":", 1)[-1], ())
    loose = {"no meat"}
    return any(a in g and b in g and (a in loose or b in loose) for g in groups)


#: Words read as an owner ("User's <owner> ...") that are none.
_VERB_OWNERS = frozenset({"are", "is", "was", "were", "has", "had"})
_OWN_ATTRIBUTES = frozenset({"diet", "job", "work", "life", "home", "routine"})


def find_slot(text: str) -> Slot | None:
    """The slot ``text`` sets, if a rule covers it (the first rule that matches).
    Dates are read in the form :func:`~sidecar.memory.model.dates.canonical_dates`
    writes them; :func:`~sidecar.memory.model.facts.shape` and
    :func:`~sidecar.memory.model.facts.slot_of` pass text in that form."""
    for rule in RULES:
        match = rule.pattern.search(text)
        if match is None:
            continue
        negated = bool(_NEGATION.search(match.group(0)))
        owner = (match.groupdict().get("owner") or "").lower()
        if owner in _VERB_OWNERS:
            continue  # "User's are called ...": an extraction slip, not an owner
        if owner in _OWN_ATTRIBUTES:
            owner = ""  # "User's diet is vegan": the user's own diet
        attribute = rule.attribute
        thing = match.groupdict().get("thing")
        if thing:
            thing = " ".join(thing.lower().split())
            thing = THINGS.get(thing, thing)
            attribute = thing if attribute == "attribute" else f"{attribute}:{thing}"
        name = f"{owner}:{attribute}" if owner else attribute
        if rule.flag is not None:
            return Slot(name, rule.flag[1] if negated else rule.flag[0])
        raw = " ".join(match.group("value").lower().split())
        value = ALIASES.get(attribute, {}).get(raw) or _clean_value(match.group("value"))
        if attribute == "phone":
            value = re.sub(r"\D", "", match.group("value"))
        elif attribute in _MEASURED:
            value = _UNIT.sub(lambda m: UNIT_NAMES[m.group(0)], value.replace(" ", ""))
            value = value.removesuffix("in")  # 6ft2in is 6ft2
        elif attribute == "occupation" and value:
            value = value.split()[-1]  # the head noun: "registered nurse" is a nurse
            if value in NOT_OCCUPATIONS:
                continue
        if attribute == "name" and owner and owner.split()[-1] not in SINGLE_RELATIONS:
            return Slot(name, value, accumulates=True)  # two daughters, two sisters
        if not value:
            continue
        return Slot(name, f"not {value}" if negated else value, rule.accumulates)
    for attribute, pattern, value in LOOSE_FLAGS:
        if pattern.search(text):
            return Slot(attribute, value)
    email = _EMAIL.search(text)
    if email is not None:  # an address the user gave: the user's e-mail
        return Slot("email", email.group(0).lower())
    return None
