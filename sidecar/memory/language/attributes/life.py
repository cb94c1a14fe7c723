"""Where the user lives and works, what they drive, support, do and keep: one
declaration per attribute (see :mod:`sidecar.memory.language.attributes`)."""

from __future__ import annotations

import re

from sidecar.memory.language.attributes.model import Attribute, Example
from sidecar.memory.language.attributes.rules import (
    TITLED,
    VALUE,
    exact,
    head_noun,
    in_passing,
    owned,
    said,
)
from sidecar.memory.language.slot_words import (
    ATTRIBUTES,
    NUMBER_WORDS,
    OCCUPATION_HEAD,
    PROFESSIONS,
)
from sidecar.memory.language.slot_words import PETS as PET_WORDS

#: "User's <thing> is <value>" for the named things of ``ATTRIBUTES`` (surname, GP,
#: landlord, employer, university ...): the thing is the attribute.
NAMED = Attribute(
    "attribute",
    words="",
    values="single, per thing named",
    rules=(
        # Before the relationship rules: "got married and took User's wife's name".
        said(
            0,
            r"(?:changed|changing|changes)\s+User['’]s\s+(?P<thing>surname|last\s+name|name)\s+to\s+"
            r"(?P<value>(?-i:[A-Z][\w'’-]+))",
        ),
        owned(500, rf"(?P<thing>{ATTRIBUTES})\s+(?:is|are)\s+(?:now\s+)?{TITLED}" + VALUE),
        said(
            510,
            rf"(?:switched|moved|changed)\s+to\s+(?:a\s+)?(?:new\s+)?(?P<thing>{ATTRIBUTES})"
            rf"[,:]?\s+{TITLED}" + VALUE,
        ),
    ),
    examples=(
        Example("User's landlord is Mrs. Patel.", "landlord", "patel"),
        Example("User changed User's surname to Okafor.", "surname", "okafor"),
        Example("User's landlord lives upstairs.", None),
    ),
)

SURNAME = Attribute(
    "surname",
    rules=(
        in_passing(
            10,
            r"(?:took|taken|taking|takes|kept|keeping)\s+User['’]s\s+"
            r"(?:wife|husband|partner|spouse)['’]s\s+(?:sur|last\s+)?name\b[^.;]*?"
            r"\b(?i:it['’]s|it\s+is|now|to)\s+(?P<value>(?-i:[A-Z][\w'’-]+))",
        ),
    ),
    examples=(
        Example("User took User's wife's surname, it's Lindqvist now.", "surname", "lindqvist"),
        Example("User spelled out User's surname for the clerk.", None),
    ),
)

RESIDENCE = Attribute(
    "residence",
    questions=("Where does the user live?", "Which city does the user live in?"),
    words="where User lives: home town, city",
    events=(
        r"\b(?:movers|relocat\w*|emigrat\w*|packed\s+up)\b",
        r"\bclosed\s+on\s+(?:a|the|User['’]s|our)\s+(?:new\s+)?(?:house|flat|home|place|condo)\b",
        r"\b(?:lease|tenancy)\b",
        r"\bhouse\s*share\b",
    ),
    rules=(
        said(
            20,
            r"(?:lives?|living|lived|resides?|residing|based|settled|moved|moving|relocated|"
            r"relocating|moving\s+back|moved\s+back)\s+(?:in|to|into)\s+(?:a\s+\w+\s+in\s+)?"
            + VALUE,
        ),
        said(30, r"(?:home|flat|apartment|house)\s+is\s+in\s+" + VALUE),
        # "User moved out of User's parents' place, renting a studio in Manchester now"
        in_passing(
            40,
            r"(?:renting|rents|rented|bought|buying|owns)\s+(?:a|an|User['’]s)\s+"
            r"(?:new\s+|little\s+|tiny\s+|small\s+)?(?:studio|flat|apartment|house|place|room|"
            r"condo|bungalow|cottage|terrace)\s+(?:in|near)\s+" + VALUE,
        ),
        said(
            50,
            r"(?:lives?|living|lived|stays?|staying)\s+(?:with|w/)\s+(?:User['’]s\s+)?"
            r"(?P<value>parents|family|mum|mom|dad|flatmates?|roommates?|housemates?|"
            r"grandparents|in-laws)\b",
        ),
        said(60, r"(?:stays?|staying)\s+in\s+" + VALUE),
        said(
            70,
            r"an?\s+(?:(?-i:[a-z]+)\s+)?(?P<value>(?-i:[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)?))\s+"
            r"(?:resident|local)\b",
        ),
        exact(
            80,
            r"^(?P<value>[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)?)\s+is\s+where\s+User\s+"
            r"(?:lives|is\s+based|is\s+living)",
            re.IGNORECASE,
        ),
        owned(
            90,
            r"(?:new\s+)?(?:home|flat|apartment|house|place)(?:['’]s)?\s+(?:is\s+)?in\s+" + VALUE,
        ),
    ),
    examples=(
        Example("User moved to Bristol.", "residence", "bristol"),
        Example("Bristol is where User lives.", "residence", "bristol"),
        Example("User visited Bristol for a wedding.", None),
    ),
)

EMPLOYER = Attribute(
    "employer",
    questions=("Where does the user work?", "Which company does the user work for?"),
    words="where User works: employer, company, job",
    events=(
        r"\b(?:notice|laid\s+off|let\s+go|made\s+redundant|new\s+job|last\s+day)\b",
        r"\b(?:accepted|took)\s+(?:the|an?|their)\s+(?:job\s+)?offer\b",
        r"\bsigned\s+with\b",
    ),
    rules=(
        said(
            100,
            r"(?:works?|working|worked|employed|started\s+working|got\s+a\s+job|"
            r"has\s+a\s+job|job)\s+(?:at|for|with)\s+" + VALUE,
        ),
        said(
            110,
            r"(?:starts|starting|started|will\s+start|begins|began)\s+at\s+"
            r"(?P<value>(?-i:[A-Z][\w&'’-]*(?:\s+[A-Z][\w&'’-]*){0,2}))",
        ),
        said(
            120,
            r"(?:started|starting|got|landed|has|have|took|accepted)\s+an?\s+(?:new\s+)?"
            r"(?:job|role|position)\s+(?:at|with)\s+" + VALUE,
        ),
        said(130, r"(?:joined|joining)\s+(?P<value>[A-Z][\w&'’-]*(?:\s+[A-Z][\w&'’-]*){0,2})"),
    ),
    examples=(
        Example("User works at Siemens.", "employer", "siemens"),
        Example("User applied to Siemens.", None),
    ),
)

OCCUPATION = Attribute(
    "occupation",
    questions=("What is the user's job?", "What does the user do for a living?"),
    words="User's job: work, occupation",
    events=(r"\b(?:retired|career\s+change|bar\s+exam|qualified\s+as|promoted)\b",),
    normalise=head_noun,
    rules=(
        said(
            140,
            r"(?:works?|working|worked|starts?|starting|started|employed)\s+as\s+(?:an?\s+)?"
            + VALUE,
        ),
        said(150, r"(?:teaches|teaching|taught)\s+(?P<value>\w+)"),
        said(
            160,
            r"(?:training|studying|qualifying|retraining|re-training)\s+(?:to\s+(?:be|become)|"
            r"as)\s+(?:an?\s+)?" + VALUE,
        ),
        owned(170, r"(?:job|profession|occupation)\s+is\s+(?:an?\s+)?" + VALUE),
        said(320, rf"(?:an?\s+)(?P<value>(?:\w+\s+)?(?:{PROFESSIONS}))\b"),
        said(
            330,
            rf"(?:is|works\s+as|has\s+been|was)\s+an?\s+(?P<value>(?:[a-z-]+\s+){{0,2}}"
            rf"{OCCUPATION_HEAD})\b(?!\s+(?:of|at\s+heart|in\s+training|fan))",
        ),
    ),
    examples=(
        Example("User works as a registered nurse.", "occupation", "nurse"),
        Example("User met a nurse at the party.", None),
    ),
)

WORKPLACE = Attribute(
    "workplace",
    questions=("Does the user work from home or from the office?",),
    words="where User works from: home or office",
    events=(r"\b(?:remote|hybrid|back\s+in\s+the\s+office|return\s+to\s+office)\b",),
    weekly=True,
    aliases={"from home": "remote", "remotely": "remote", "remote": "remote"},
    rules=(
        said(180, r"(?:works?|working)\s+(?P<value>from\s+home|remotely|remote|hybrid)\b"),
        said(
            190,
            r"(?:commutes?|commuting)\s+(?:in)?to\s+(?:the\s+office\s+in\s+)?" + VALUE,
        ),
        # "User and others are back in the office four days a week now"
        said(
            200,
            r"(?:are\s+|were\s+|goes\s+|going\s+|went\s+)?(?:back\s+)?(?:in|into|to)\s+the\s+"
            r"(?P<value>office)\b",
        ),
    ),
    examples=(
        Example("User works from home on Fridays.", "workplace", "remote"),
        Example("User's office has a gym.", None),
    ),
)

BEDTIME = Attribute(
    "bedtime",
    words="when User goes to bed: bedtime",
    weekly=True,
    rules=(
        # "User goes to bed around 11pm", "User's new routine is lights out at 9:30"
        in_passing(
            400,
            r"(?:(?:goes|go|going|gets|get|went)\s+to\s+(?:bed|sleep)|"
            r"lights\s+out|bedtime|asleep|in\s+bed)\s+(?:is\s+)?(?:at|around|by|about|before)\s+"
            r"(?:about\s+|around\s+)?(?P<value>\d{1,2}(?:[:.]\d{2})?\s*(?:am|pm)?|midnight)",
        ),
    ),
    examples=(
        Example("User goes to bed around 11pm.", "bedtime", "23:00"),
        Example("User bought a new bed.", None),
    ),
)

CAR = Attribute(
    "car",
    questions=("What car does the user drive?", "How does the user get around?"),
    words="the car User drives",
    events=(r"\b(?:traded\s+in|written\s+off|test\s+drive|new\s+car|car)\b",),
    rules=(
        said(560, r"(?:drives|driving)\s+(?:an?\s+|the\s+)?" + VALUE),
        owned(570, r"car\s+is\s+(?:an?\s+|the\s+)?" + VALUE),
    ),
    examples=(
        Example("User drives a Honda Civic.", "car", "honda civic"),
        Example("User's car broke down.", None),
    ),
)

COMMUTE = Attribute(
    "commute",
    questions=("How does the user get to work?", "How does the user commute?"),
    words="how User gets to work: commute",
    events=(r"\b(?:commute|commuting)\b",),
    rules=(
        said(
            565,
            r"(?:commutes?|commuting|gets?\s+to\s+work|goes\s+to\s+work)\s+(?:by|on)\s+"
            r"(?:the\s+|a\s+|User['’]s\s+)?" + VALUE,
        ),
        said(
            566,
            r"(?:takes?|taking|catches|catching)\s+(?:the\s+|a\s+)?"
            r"(?P<value>tram|bus|train|tube|metro|subway|underground|ferry|overground)\b",
        ),
        said(
            567,
            r"(?:rides?|riding)\s+(?:a\s+|an\s+|the\s+|User['’]s\s+)?(?P<value>(?:[A-Za-z-]+\s+)?"
            r"(?:bike|scooter|vespa|moped|motorbike|motorcycle))\s+to\s+(?:work|the\s+office)\b",
        ),
        said(
            568,
            r"(?P<value>cycles|bikes|walks|runs|drives|scoots)\s+to\s+(?:work|the\s+office)\b",
        ),
    ),
    examples=(
        Example("User takes the tram now.", "commute", "tram"),
        Example("User commutes by bus.", "commute", "bus"),
        Example("User took the bus to the beach on holiday.", None),
    ),
)

TEAM = Attribute(
    "team",
    questions=("Which team does the user support?",),
    words="the team User supports",
    events=(r"\b(?:allegiance|season\s+ticket)\b",),
    rules=(
        said(
            580,
            r"(?:is\s+an?\s+)(?:huge\s+|big\s+|massive\s+|die-hard\s+)?"
            r"(?P<value>(?:[A-Z][\w'’.-]*\s+){1,3})(?:fan|supporter)\b",
        ),
        said(
            590,
            r"(?:supports|supporting|roots\s+for|cheers\s+(?:for|on)|is\s+a\s+fan\s+of|"
            r"follows)\s+(?:the\s+)?" + VALUE,
        ),
    ),
    examples=(
        Example("User supports Celtic.", "team", "celtic"),
        Example("User watched Celtic lose.", None),
    ),
)

HOBBY = Attribute(
    "hobby",
    words="User's hobbies and sports",
    accumulates=True,
    values="accumulates",
    rules=(
        said(680, r"(?:plays|playing)\s+(?:the\s+)?" + VALUE),
        said(
            690,
            r"(?:is\s+)?(?:really\s+|very\s+|super\s+)?(?:into|taken\s+up|took\s+up|"
            r"taking\s+up)\s+" + VALUE,
        ),
        owned(700, r"hobby\s+is\s+" + VALUE),
    ),
    examples=(
        Example("User plays the cello.", "hobby", "cello"),
        Example("User bought a cello for User's niece.", None),
    ),
)

PETS = Attribute(
    "pets",
    words="User's pets",
    accumulates=True,
    values="accumulates",
    rules=(
        said(
            710,
            rf"(?:has|owns|got|adopted)\s+(?:an?\s+|{NUMBER_WORDS}\s+)(?P<value>{PET_WORDS})s?\b",
        ),
    ),
    examples=(
        Example("User adopted a kitten.", "pets", "kitten"),
        Example("User is afraid of dogs.", None),
    ),
)

GYM = Attribute(
    "gym",
    questions=("Where does the user work out?", "Which gym does the user go to?"),
    words="where User works out: gym",
    events=(r"\b(?:membership|gym)\b",),
    rules=(
        owned(720, r"gym\s+is\s+(?:now\s+)?(?:the\s+)?" + VALUE),
        said(
            730,
            r"(?:trains|training|trained|works\s+out|working\s+out|worked\s+out)\s+at\s+"
            r"(?:the\s+)?" + VALUE,
        ),
    ),
    examples=(
        Example("User's gym is PureGym Leeds.", "gym", "puregym leeds"),
        Example("User trains at Anytime Fitness now.", "gym", "anytime fitness"),
        Example("User walked past a gym on the way home.", None),
    ),
)

#: A school's name: one or two capitalised words ("UCL", "St Andrews").
_SCHOOL = r"(?-i:[A-Z][\w&'’-]*(?:\s+[A-Z][\w'’-]*)?)"
_SCHOOL_NAME = rf"(?P<value>{_SCHOOL})"

SCHOOL = Attribute(
    "school",
    questions=(
        "Which school or university does the user attend?",
        "Where does the user study?",
    ),
    words="where User studies: school, university",
    events=(r"\b(?:transferr?\w*|enrol+\w*|first\s+year|semester|degree|major)\b",),
    # A change ("User transferred to Imperial for the rest of User's degree") is
    # placed by its questions; the rule reads where the user studies when the text
    # says so. "User's university is UCL" is the named attribute's.
    rules=(
        said(
            740,
            r"(?:studies|studying|studied|enrolled|a\s+student|doing\s+(?:User['’]s\s+|a\s+)?"
            r"(?:master['’]?s|phd|doctorate|degree|ba|bsc|ma|msc|mba|undergrad\w*)"
            r"(?:\s+in\s+[a-z]+)?)\s+(?:\w+\s+)?at\s+" + _SCHOOL_NAME,
        ),
        said(
            315,
            r"an?\s+(?:[a-z-]+\s+){0,2}(?:major|student|undergrad\w*|postgrad\w*|fresher)\s+at\s+"
            + _SCHOOL_NAME,
        ),
        said(
            750,
            r"at\s+(?P<value>" + _SCHOOL + r"\s+(?i:uni|university|college))\b",
        ),
    ),
    examples=(
        Example("User is doing User's master's at UCL.", "school", "ucl"),
        Example("User is at Bristol uni doing English.", "school", "bristol uni"),
        Example("User met a friend at Leeds University.", None),
    ),
)

LIFE = (
    NAMED, SURNAME, RESIDENCE, EMPLOYER, OCCUPATION, WORKPLACE, BEDTIME, CAR, COMMUTE, TEAM,
    HOBBY,
    PETS, GYM, SCHOOL,
)  # fmt: skip
