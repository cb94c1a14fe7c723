"""Who the user is: names, relationship, body, diet and habits, contact details,
languages and allergies: one declaration per attribute (see
:mod:`sidecar.memory.language.attributes`)."""

from __future__ import annotations

import re

from sidecar.memory.language.attributes.model import Attribute, Example
from sidecar.memory.language.attributes.rules import (
    GIVE_UP,
    VALUE,
    WEIGHT_UNIT,
    digits,
    exact,
    flag,
    in_passing,
    loose,
    measure,
    owned,
    said,
)
from sidecar.memory.language.lexicon import EMAIL_ADDRESS
from sidecar.memory.language.slot_words import DIETS, RELATIONS, SINGLE_RELATIONS

NAME = Attribute(
    "name",
    words="what to call User: name",
    one_per_owner=SINGLE_RELATIONS,
    values="single (accumulates for relations one may have several of)",
    rules=(
        exact(
            210,
            r"\bUser(?:\s+and\s+others)?\s+(?:has\s+|have\s+)?renamed\s+(?:the|User['’]s)\s+"
            r"(?P<owner>[a-z]+)\b.*?\b(?:to|answers\s+to|called|named)\s+"
            r"(?P<value>[A-Z][\w'’-]*)",
            re.IGNORECASE,
        ),
        exact(
            220,
            r"\bUser['’]s\s+(?:little\s+|younger\s+|older\s+|big\s+|eldest\s+|youngest\s+)?"
            rf"(?P<owner>{RELATIONS})(?:['’]s\s+name\s+is|\s+is\s+(?:called|named))\s+"
            r"(?P<value>[A-Z][\w'’-]+)",
        ),
        exact(
            230,
            rf"\bUser\s+(?:has|had)\s+an?\s+(?P<owner>{RELATIONS})\s+(?:called|named)\s+"
            r"(?P<value>[A-Z][\w'’-]+)",
        ),
        exact(
            240,
            rf"^(?P<value>[A-Z][\w'’-]+)\s+is\s+User['’]s\s+(?P<owner>{RELATIONS})\b"
            r"(?!\s+tongue)",
        ),
        exact(
            340,
            r"\b(?i:everyone|everybody|people|friends|most\s+people|folks)\s+(?:now\s+)?"
            r"calls?\s+User\s+(?P<value>[A-Z][\w'’-]+)",
        ),
        said(
            350,
            r"(?:is\s+called|called|named|goes\s+by|prefers\s+to\s+be\s+called|"
            r"wants\s+to\s+be\s+called|likes\s+to\s+be\s+called)\s+(?P<value>[\w'’-]+)",
        ),
        owned(360, r"(?:nick)?name\s+is\s+(?P<value>[\w'’-]+)"),
    ),
    examples=(
        Example("User goes by Sam.", "name", "sam"),
        Example("User's dog is called Biscuit.", "dog:name", "biscuit"),
        Example("User's sister is called Ana.", "sister:name", "ana"),
        Example("User named the spreadsheet Budget.", None),
    ),
)

RELATIONSHIP = Attribute(
    "relationship",
    questions=("Who is the user's partner?",),
    words="User's relationship: partner, dating, single or married",
    aliases={"seeing": "dating"},
    rules=(
        flag(
            270,
            r"(?:broke\s+up|split\s+up|separated|divorced|got\s+divorced)\b",
            ("single", "single"),
        ),
        said(
            290,
            r"(?:is|got|became|has\s+been)\s+(?:now\s+|officially\s+|happily\s+)?"
            r"(?P<value>single|married|engaged|divorced|separated|widowed)\b",
        ),
        said(
            300,
            r"(?:is|has\s+been|started|starting|been)\s+(?:now\s+)?(?P<value>seeing|dating)\s+"
            r"(?=someone|somebody|(?:a|this)\s+(?:guy|girl|man|woman|lad|lass|bloke)\b|"
            r"(?-i:[A-Z]))",
        ),
        owned(
            310,
            r"(?:girlfriend|boyfriend|partner|wife|husband|fianc[ée]e?|spouse)\s+"
            r"(?:is\s+(?:called\s+|named\s+)?)?(?P<value>[A-Z][\w'’-]+)",
        ),
    ),
    examples=(
        Example("User got engaged last month.", "relationship", "engaged"),
        Example("User broke up with User's boyfriend.", "relationship", "single"),
        Example("User went to a friend's wedding.", None),
    ),
)

DIET = Attribute(
    "diet",
    questions=("What diet does the user follow?",),
    words="what User eats: diet",
    aliases={"pescetarian": "pescatarian"},
    compatible=(frozenset({"no meat", "vegetarian", "vegan", "pescatarian"}),),
    looser=frozenset({"no meat"}),
    rules=(
        said(
            280,
            rf"(?:gone|went|turned|become|became|going|switched\s+to\s+being)\s+"
            rf"(?:fully\s+|completely\s+)?(?P<value>{DIETS})\b",
        ),
        said(
            370,
            rf"(?:an?\s+)?(?:strict(?:ly)?\s+|full(?:y)?\s+|mostly\s+)?(?P<value>{DIETS})\b",
        ),
        # Meat as such: not eating pork is not not eating beef (both hold, two facts).
        flag(
            380,
            GIVE_UP + r"(?:eats?|eating|ate)\s+(?:any\s+)?meat\b",
            ("meat eater", "no meat"),
        ),
        # "User started eating fish again, so pescatarian now"
        in_passing(
            390,
            rf"(?:so|now|basically|officially|technically)\s+(?:an?\s+)?"
            rf"(?P<value>{DIETS})\b",
        ),
        loose(1020, r"\b(?:no|zero)\s+meat\b|\bmeat-free\b|\bplant-based\b", "no meat"),
    ),
    examples=(
        Example("User went vegan in January.", "diet", "vegan"),
        Example("User does not eat meat.", "diet", "no meat"),
        Example("User cooked a vegan lasagne for a friend.", None),
    ),
)

ALCOHOL = Attribute(
    "alcohol",
    words="whether User drinks alcohol",
    values="yes / no",
    rules=(
        flag(
            410,
            GIVE_UP + r"(?:drinks?|drinking|drank|touches?)\s+(?:any\s+|an?\s+(?:\w+\s+)?"
            r"(?:glass|pint|bottle|can|drop)\s+of\s+)?"
            r"(?:alcohol|booze|beer|wine|spirits|liquor)\b",
        ),
        loose(
            1000,
            r"\b(?:no|zero)\s+(?:alcohol|booze|drinking)\b|\b(?:alcohol|booze)-free\b|"
            r"\b(?:sober|teetotal\w*|tee-total\w*)\b",
            "no",
        ),
    ),
    examples=(
        Example("User gave up drinking alcohol.", "alcohol", "no"),
        Example("User is teetotal.", "alcohol", "no"),
        Example("User collects wine labels.", None),
    ),
)

SMOKING = Attribute(
    "smoking",
    words="whether User smokes",
    values="yes / no",
    rules=(
        flag(420, GIVE_UP + r"(?:smokes?|smoking|smoked|(?:a\s+)?smoker)\b"),
        loose(1010, r"\bnon-?smoker\b", "no"),
        loose(
            1030,
            r"\bwithout\s+(?:a\s+(?:single\s+)?)?cigarettes?\b|\bquit\s+smoking\b",
            "no",
        ),
    ),
    examples=(
        Example("User quit smoking in 2019.", "smoking", "no"),
        Example("User hates the smell of smoke.", None),
    ),
)

VAPING = Attribute(
    "vaping",
    words="whether User vapes",
    values="yes / no",
    rules=(flag(430, GIVE_UP + r"(?:vapes?|vaping|vaped|(?:a\s+)?vaper)\b"),),
    examples=(
        Example("User vapes.", "vaping", "yes"),
        Example("User's brother sells vape pens.", None),
    ),
)

FAVORITE = Attribute(
    "favorite",
    words="",
    values="single, per thing (favorite:food, favorite:band ...)",
    rules=(
        exact(
            250,
            r"^(?:the\s+)?(?P<value>[\w'’ -]+?)\s+(?:is|has\s+(?:become|overtaken\s+\w+"
            r"(?:\s+\w+)?\s+as))\s+(?:hands\s+down\s+|definitely\s+|easily\s+|now\s+)?"
            r"User['’]s\s+(?:new\s+)?(?:favou?rite|number\s+one|top|go-to|fave)\s+"
            r"(?P<thing>[a-z]+)",
            re.IGNORECASE,
        ),
        exact(
            260,
            r"^(?:the\s+)?(?P<value>[\w'’ -]+?)\s+is\s+(?:now\s+)?User['’]s\s+(?:new\s+)?"
            r"(?P<thing>colou?r|drink|tipple|snack|dish|meal|food|song|band|film|movie|book|"
            r"sport|season|game)\b",
            re.IGNORECASE,
        ),
        owned(
            440,
            r"(?:favou?rite|fave)\s+(?P<thing>[a-z]+(?:\s+[a-z]+)?)\s+is\s+(?:a\s+|the\s+)?"
            + VALUE,
        ),
    ),
    examples=(
        Example("User's favourite band is Radiohead.", "favorite:band", "radiohead"),
        Example("User saw Radiohead live.", None),
    ),
)

PHONE = Attribute(
    "phone",
    words="User's phone number",
    normalise=digits,
    rules=(
        owned(
            450,
            r"(?:(?:new\s+)?(?:phone|mobile|cell)(?:\s+number)?|(?:new\s+)?number)(?:\s+is|:)\s+"
            r"(?P<value>[+\d][\d ()./-]{5,}\d)",
        ),
    ),
    examples=(
        Example("User's phone number is +44 7700 900123.", "phone", "447700900123"),
        Example("User's phone is broken.", None),
    ),
)

EMAIL = Attribute(
    "email",
    words="User's email address",
    rules=(
        owned(
            460,
            rf"(?:e-?mail(?:\s+address)?)\s+is\s+(?P<value>{EMAIL_ADDRESS})",
        ),
        # An address the user gave, anywhere: the user's e-mail.
        loose(1040, EMAIL_ADDRESS),
    ),
    examples=(
        Example("User's email is samh@proton.me.", "email", "samh@proton.me"),
        Example("User prefers e-mail to phone calls.", None),
    ),
)

BIRTHDAY = Attribute(
    "birthday",
    words="User's birthday",
    rules=(
        owned(470, r"(?:birthday|b-?day)(?:['’]s)?\s+(?:is|falls)\s+(?:on\s+|in\s+)?" + VALUE),
        # Dates are canonical here ("November 14", :mod:`sidecar.memory.language.dates`).
        exact(
            480,
            r"^(?P<value>[A-Z][a-z]+ \d{1,2})\s+is\s+User['’]s\s+(?:birthday|b-?day)\b",
        ),
        exact(
            490,
            r"\bUser\s+celebrates\s+User['’]s\s+birthday\s+on\s+"
            r"(?P<value>[A-Z][a-z]+ \d{1,2})",
        ),
        said(520, r"was\s+born\s+(?:on\s+|in\s+)?" + VALUE),
    ),
    examples=(
        Example("User's birthday is November 14.", "birthday", "november 14"),
        Example("User planned a birthday party for a colleague.", None),
    ),
)

AGE = Attribute(
    "age",
    words="how old User is: age",
    rules=(
        said(
            530,
            r"(?:is|turned|turns|just\s+turned)\s+(?P<value>\d{1,3})"
            r"(?:\s+years?\s+old\b|\s*(?=[,;.!?]?\s*$|[,;!?]|\.(?!\d)|\s+(?:now|today|"
            r"yesterday|tomorrow|this|last|next|in|on|at|and|but|so|soon|already|recently|"
            r"earlier|the)\b))",
        ),
    ),
    examples=(
        Example("User turned 34 last week.", "age", "34"),
        Example("User is 3 stops from work.", None),
    ),
)

WEIGHT = Attribute(
    "weight",
    words="how much User weighs: weight",
    normalise=measure,
    rules=(
        said(
            540,
            r"(?:weighs?|weighing|weighed|is\s+(?:now\s+)?(?:down|up)\s+to|is\s+(?:now\s+)?at|"
            r"got\s+(?:down|up)\s+to)\s+(?:about\s+|around\s+|roughly\s+|just\s+(?:under|over)\s+)?"
            rf"(?P<value>\d+(?:\.\d+)?\s*{WEIGHT_UNIT})",
        ),
    ),
    examples=(
        Example("User weighs 82 kilos.", "weight", "82kg"),
        Example("User lifted 82 kilos.", None),
    ),
)

HEIGHT = Attribute(
    "height",
    words="how tall User is: height",
    normalise=measure,
    rules=(
        said(
            550,
            r"(?:is|stands)\s+(?:about\s+|around\s+|roughly\s+)?"
            r"(?P<value>\d(?:\.\d+)?\s*m(?:etres?|eters?)?|\d{2,3}\s*cm|"
            r"\d\s*(?:foot|feet|ft|')(?:\s*\d{1,2}(?:\s*(?:inches|in|\"))?)?)"
            r"(?:\s+tall)?(?!\w|\.\d)",
        ),
    ),
    examples=(
        Example("User is 6ft 2in tall.", "height", "6ft2"),
        Example("User's son is 120 cm tall.", "son:height", "120cm"),
        Example("User's desk is too tall.", None),
    ),
)

NATIVE_LANGUAGE = Attribute(
    "native language",
    words="User's native language",
    rules=(
        owned(600, r"(?:native\s+language|mother\s+tongue|first\s+language)\s+is\s+" + VALUE),
        exact(
            610,
            r"^(?P<value>[A-Z][\w'’-]*?)(?:['’]s)?\s+is\s+User['’]s\s+"
            r"(?:native\s+language|mother\s+tongue|first\s+language)\b",
        ),
    ),
    examples=(
        Example("User's mother tongue is Polish.", "native language", "polish"),
        Example("User is learning Polish.", None),
    ),
)

LANGUAGE = Attribute(
    "language",
    words="languages User speaks",
    accumulates=True,
    values="accumulates",
    rules=(said(620, r"(?:speaks?|speaking)\s+(?:fluent\s+)?" + VALUE),),
    examples=(
        Example("User speaks fluent Portuguese.", "language", "portuguese"),
        Example("User wants to learn Portuguese.", None),
    ),
)

ALLERGY = Attribute(
    "allergy",
    words="what User is allergic to: allergies",
    accumulates=True,
    values="accumulates",
    rules=(
        said(630, r"(?:is\s+)?allergic\s+to\s+" + VALUE),
        said(
            640,
            r"(?:has|have|got|suffers?\s+from)\s+(?:an?\s+)?(?:severe\s+|bad\s+|mild\s+)?"
            r"allergy\s+to\s+(?P<value>\w+)",
        ),
        said(
            650,
            r"(?:has|have|got|suffers?\s+from)\s+(?:an?\s+)?(?:severe\s+|bad\s+|mild\s+)?"
            r"(?P<value>\w+)\s+allergy\b",
        ),
        said(660, r"(?:is\s+)?(?P<value>\w+)[- ]allergic\b"),
        owned(670, r"(?P<value>\w+)\s+allergy\s+is\b"),
    ),
    examples=(
        Example("User is allergic to penicillin.", "allergy", "penicillin"),
        Example("User's allergy medicine ran out.", None),
    ),
)

PERSON = (
    NAME,
    RELATIONSHIP,
    DIET,
    ALCOHOL,
    SMOKING,
    VAPING,
    FAVORITE,
    PHONE,
    EMAIL,
    BIRTHDAY,
    AGE,
    WEIGHT,
    HEIGHT,
    NATIVE_LANGUAGE,
    LANGUAGE,
    ALLERGY,
)
