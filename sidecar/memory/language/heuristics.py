"""The non-LLM fact extractor: what the user says about themselves, rewritten about
"User", without changing what it means.

It is the fallback whenever no extraction LLM is configured or the LLM fails, so it
is conservative. Sentence by sentence:

* interjections and chit-chat before a statement go ("Morning! Anyway, I ..."); a
  "No" is only an interjection when it stands alone ("No, I ...", not "No booze for
  me");
* questions, requests and greetings are never facts; instructions to the assistant
  ("never book anything before 10", "I want you to ...") are constraints;
* a first-person statement is rewritten in the third person with its negation and
  modality kept ("I don't drink" -> "User does not drink", "I used to smoke" ->
  "User used to smoke"); verbs are conjugated only when they are present-tense base
  forms (no "User hads"); common chat spellings are read as meant ("dont", "im");
* a statement without its subject ("Moved to Phoenix last week", "Officially
  single again", "New number: 0151 ...") is read as the user's;
* a sentence that leans on the one before it ("That's my focus time", "I never take
  meetings then", "They're my team") is joined to the fact the same turn stated
  just before it, or dropped when there is none;
* one-off states of the moment ("so tired today", "my alarm didn't go off this
  morning") are not stored, nor facts with too little content to mean anything on
  their own ("Sorry, I was away").
"""

from __future__ import annotations

import re

from sidecar.memory.language.clauses import statement_before_question
from sidecar.memory.language.entities import named_subject
from sidecar.memory.language.facts import shape
from sidecar.memory.language.lexicon import IRREGULAR_PAST, SAME_IN_PRESENT
from sidecar.memory.language.text import tokens
from sidecar.memory.records.records import MemoryType
from sidecar.memory.records.turns import Fact

HEURISTIC_CONFIDENCE = 0.6

_SENTENCE = re.compile(
    r"(?<!\b(?:dr|mr|ms|st|vs|jr|sr)\.)(?<!\bmrs\.)(?<!\bprof\.)(?<=[.!?])\s+|\n+|;\s+|"
    r",\s+(?=(?:please\s+)?(?:don't|dont|do\s+not|never|always)\s+"
    r"(?!have\b|had\b|been\b|was\b|were\b|did\b|do\b|does\b))",
    re.IGNORECASE,
)
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})
_FIRST_PERSON = re.compile(
    r"\b(i|i'm|i've|i'd|i'll|my|me|mine|myself|we|we're|we've|our|us)\b", re.I
)
_INTERJECTION = re.compile(
    r"^(?:(?:hi|hello|hey|heya|hiya|yo|morning|evening|good\s+(?:morning|evening|afternoon)|"
    r"thanks|thank\s+you|thx|cheers|ok|okay|oh|ah|ugh|urgh|argh|um|uh|hmm|well|so|anyway|"
    r"anyways|btw|by\s+the\s+way|fyi|lol|haha+|yeah|yep|yup|yes|sure|cool|great|nice|"
    r"right|sorry|oops|wow|honestly|basically|also|and|but|quick\s+q|quick\s+question|"
    r"quick\s+one|"
    r"no(?=\s*[,!.:-]))\b[\s,!.:;…-]*)+",
    re.IGNORECASE,
)
_PREFACE = re.compile(
    r"^(?:please\s+)?(?:remember|note|keep\s+in\s+mind|just\s+so\s+you\s+know|"
    r"for\s+the\s+record|for\s+context|fyi)(?:\s+that)?[\s,:]+",
    re.IGNORECASE,
)
#: An announcement before the news: "Finally did it, relocated to ...", "Big news:
#: we're moving", "Guess what - I got the job".
_ANNOUNCEMENT = re.compile(
    r"^(?:(?:i\s+)?(?:finally\s+)?(?:did|done|made)\s+it|guess\s+what|(?:big|good|great|"
    r"some|exciting|happy)\s+news|news|update|quick\s+update|it['’]?s\s+official|"
    r"it\s+happened|omg|finally)\s*[,:!;—–-]+\s*",
    re.IGNORECASE,
)
_REQUEST_START = re.compile(
    r"^(can|could|would|will|please|tell|help|what|why|how|when|where|who|which|do|does|"
    r"did|is|are|should|let's|lets|show|give|write|explain|find|use|make|send|book|remind|"
    r"schedule|add|set|check|list|suggest|recommend|translate|draft|plan|create|fix|call|"
    r"summari[sz]e|compare|any|got\s+any|pick|choose|name|describe|imagine|brainstorm|"
    r"pretend|generate|outline|provide|rewrite|rephrase|elaborate|continue)\b",
    re.I,
)
_CONSTRAINT = re.compile(
    r"^(?:please\s+)?(?P<how>always|never|don't\s+ever|do\s+not\s+ever|don't|do\s+not)\s+"
    r"(?P<rest>(?P<verb>[a-z]+)\b.*)$",
    re.IGNORECASE,
)
_WANT_YOU = re.compile(r"\bi(?:\s+want|\s+need|'d\s+like|\s+would\s+like)\s+you\s+to\s+", re.I)
#: A reply to what the assistant said, not a fact about the user: "User will
#: definitely check out those brands.", "User will keep your tips in mind.", "Let
#: User know if you need more help.", "User sees what you mean about the fare."
_REACTION = re.compile(
    r"^(?:User\s+(?:will|would|might|may|is\s+going\s+to|thinks\s+User\s+will)\s+"
    r"(?:(?:definitely|probably|also|certainly|surely|totally|now|really|just)\s+)*"
    r"(?:check(?:ing)?\s+out|look\s+(?:into|at)|try|keep|take|consider|give|bear|"
    r"remember|follow|explore|read|watch)\b.*\b(?:those|these|them|your|you)\b"
    r"|(?:Let|Tell)\s+User\s+know\b"
    r"|User\s+(?:sees|understands|gets)\s+what\s+you\s+mean\b)",
    re.IGNORECASE,
)
_PROCEDURAL = re.compile(
    r"\bi (usually|always|typically|normally|generally|tend to|prefer to)\b", re.I
)
#: Spelling of chat messages, read as meant.
_CHAT_SPELLING = (
    (re.compile(r"\bim\b", re.I), "I'm"),
    (re.compile(r"\bive\b", re.I), "I've"),
    (re.compile(r"\b(?:dont|dnot|donot)\b", re.I), "don't"),
    (re.compile(r"\bdoesnt\b", re.I), "doesn't"),
    (re.compile(r"\bdidnt\b", re.I), "didn't"),
    (re.compile(r"\bcant\b", re.I), "can't"),
    (re.compile(r"\bwont\b", re.I), "won't"),
    (re.compile(r"\bisnt\b", re.I), "isn't"),
    (re.compile(r"\bwasnt\b", re.I), "wasn't"),
    (re.compile(r"\bhavent\b", re.I), "haven't"),
    (re.compile(r"\bhasnt\b", re.I), "hasn't"),
    (re.compile(r"\bu\b", re.I), "you"),
)
#: Verb forms after "I" that stay as they are in the third person.
_SAME = frozenset("""was can could will would should must might may shall used""".split())
_IRREGULAR = {"am": "is", "'m": "is", "have": "has", "'ve": "has", "do": "does", "go": "goes",
              "'d": "would", "'ll": "will", "be": "is", "were": "was",
              "been": "has been"}  # fmt: skip
_NEGATIONS = {
    "don't": "does not", "do not": "does not", "can't": "cannot", "cannot": "cannot",
    "won't": "will not", "didn't": "did not", "haven't": "has not", "wasn't": "was not",
    "wouldn't": "would not", "couldn't": "could not", "shouldn't": "should not",
    "am not": "is not", "'m not": "is not",
}  # fmt: skip
#: Adverbs between "I" and its verb: "I usually go" -> "User usually goes".
ADVERBS = frozenset(
    {
        "usually", "always", "often", "sometimes", "never", "really", "also", "just",
        "still", "typically", "normally", "generally", "mostly", "rarely", "actually",
        "recently", "currently", "now", "already", "finally", "even", "only", "mainly",
        "ever", "once", "first", "personally", "literally", "honestly", "definitely",
        "absolutely", "seriously", "totally", "kinda", "barely", "hardly", "almost",
        "officially", "genuinely", "basically", "probably", "no", "longer",
    }
)  # fmt: skip
_IMPLIED_I = re.compile(
    r"^(?:just\s+|finally\s+|recently\s+)?(?P<verb>[a-z]{3,}ed|got|went|took|gave|made|"
    r"bought|left|quit|sold|began|started|moved|switched|signed|adopted|traded|handed|"
    r"joined|finished|became|met|found|lost|won|broke|spent|sent|been)\b",
    re.IGNORECASE,
)
#: "Spirited Away is ...": a sentence whose first words are its subject.
_NAMED_SUBJECT = re.compile(r"^\S+(?:\s+\S+){0,2}\s+(?:is|are|was|were|'s)\b", re.I)
_GERUND = re.compile(
    r"^(?:still\s+|currently\s+|now\s+)?(?:[a-z]{3,}|do)ing\b(?!\s+(?:is|was)\b)", re.I
)
_NOUN_STATEMENT = re.compile(
    r"^(?:my\s+)?(?P<new>new\s+)?(?P<what>(?:(?:mobile|phone|cell|home|work|personal)\s+)?"
    r"(?:number|phone|mobile|e-?mail|address|routine|job|role|schedule|plan|car|flat|"
    r"place|home|gp|doctor|dentist))\s*[:=]\s*(?P<value>\S.*)$",
    re.IGNORECASE,
)
_STATUS = re.compile(
    r"^(?:(?:officially|finally|now|happily|newly|recently|still|proudly)\s+)*"
    r"(?P<status>single|married|engaged|divorced|separated|retired|unemployed|sober|"
    r"vegan|vegetarian|pescatarian|teetotal|"
    r"(?:down|up)\s+to\s+\d+(?:\.\d+)?\s*(?:kg|kgs|kilos?|kilograms?|lbs?|pounds|stone)"
    r"(?=\W|$))(?P<rest>[^?]*)$",
    re.IGNORECASE,
)
_CALL_ME = re.compile(
    r"^(?i:(?:please\s+|just\s+|you\s+can\s+|feel\s+free\s+to\s+|do\s+)*call\s+me\s+)"
    r"(?P<name>[A-Z][\w'-]+)(?:\s+(?i:please|from\s+now\s+on|instead))*[.!]?$"
)
_FROM_NOW_ON = re.compile(r"\b(?:from\s+now\s+on|going\s+forward|in\s+future)\b", re.I)
#: A change stated without its object ("I've quit for good"): the sentence before it
#: in the same turn says what changed.
_BARE_CHANGE = re.compile(
    r"\b(?:quit|stopped|given\s+up|gave\s+up|started|switched|kicked\s+the\s+habit)"
    r"(?:\s+(?:for\s+good|now|again|completely|altogether|too|at\s+last))?\s*\.?$",
    re.IGNORECASE,
)
_LEADING_REFERENCE = re.compile(
    r"^(?:(?:that|this|it|those|these|they|he|she|which)(?:'s|'re|'ll|\s+(?:is|was|are|"
    r"were|will|has|had|makes|means|explains|answers|loves|hates))|"
    r"(?:her|his|their|its)\s+(?:name|names|job|age|birthday)(?:'s|\s+is|\s+are))\b",
    re.IGNORECASE,
)
_TRAILING_REFERENCE = re.compile(
    r"\b(?:then|there|(?:love|like|hate|enjoy|need|want|do|did|said|mean|meant)\s+"
    r"(?:that|this))\s*$",
    re.IGNORECASE,
)
_ONE_OFF = re.compile(
    r"\b(?:today|tonight|this\s+(?:morning|afternoon|evening)|right\s+now|"
    r"at\s+the\s+moment|yesterday|last\s+night|just\s+now)\b",
    re.IGNORECASE,
)
#: A scene being told: "User was telling ...", "User just got back ...".
_SCENE = re.compile(
    r"^User\s+(?:was|were)\s+(?!born\b)[a-z]+ing\b|"
    r"\bUser\s+(?:has\s+)?just\s+(?:got|had|came|went|saw|ate|woke|finished|realised|"
    r"realized|noticed|remembered|heard|found\s+out)\b",
    re.IGNORECASE,
)
#: Times that are a phase when the user is in the middle of something longer.
_PHASE_TIME = re.compile(r"right\s+now|at\s+the\s+moment", re.IGNORECASE)
_ONGOING = re.compile(
    r"\b(?:learning|studying|training|reading|writing|working\s+on|saving\s+(?:up\s+)?for|"
    r"renting|living|staying|building|practi[sc]ing|taking\s+(?:classes|lessons|a\s+course)|"
    r"recovering|pregnant|unemployed|between\s+jobs)\b",
    re.IGNORECASE,
)
#: An event of the user's life told as it happened: something got, bought, met,
#: attended, begun or ended ("User just got a smoker", "User caught up with Emma over
#: lunch", "User adopted a kitten"); not getting home or up, nor a mood.
_EVENT = re.compile(
    r"\bUser\s+(?:has\s+|had\s+)?(?:just\s+|finally\s+|recently\s+|also\s+)?(?:"
    r"got(?!\s+(?:home|up|ready|dressed|back\b|in\b|off\b|out\b|so\b|"
    r"really\b|very\b|too\b|a\s+bit\b|tired|bored|sick|stuck|lost\b))|"
    r"bought|purchased|ordered|adopted|met\b|caught\s+up\s+with|catches\s+up\s+with|"
    r"attended|visited|started|finished|completed|graduated|moved|signed|received|"
    r"booked|won\b|joined|quit\b|sold|picked\s+up|upgraded|replaced|installed|"
    r"volunteered|participated|donated|planted|reached|launched|published|married|"
    r"got\s+(?:married|engaged|promoted|hired)|returned\s+from)",
    re.IGNORECASE,
)
_MOOD = re.compile(
    r"\b(?:tired|exhausted|sleepy|hungry|bored|cranky|grumpy|stressed|sick|sad|annoyed|"
    r"knackered|wiped|hungover|sore|ill|unwell|hyped|excited|nervous|anxious)\b",
    re.IGNORECASE,
)
#: "Doing fine, thanks", "I'm doing well": the answer to "how are you?".
_HOW_I_AM = re.compile(
    r"^(?:I['’]?m\s+|I\s+am\s+|User\s+is\s+)?(?:still\s+)?doing\s+(?:fine|well|ok|okay|good|"
    r"great|alright|all\s+right|better|worse|badly)\b",
    re.IGNORECASE,
)


def mood_of_the_moment(text: str) -> bool:
    """Whether ``text`` says little more than how the user feels right now ("I'm so
    tired today, ugh."): a mood word and fewer than eight content words."""
    return _MOOD.search(text) is not None and len(tokens(text)) < 8


def _momentary(text: str) -> bool:
    """A state or scene of the moment ("so tired today", "User was arguing with a
    friend about ...", "User just got back ..."), not a phase of the user's life
    ("learning to knit at the moment") nor an event of it told as it happened ("User
    just got a smoker today": the date is kept with it, :mod:`.absolute`)."""
    if _EVENT.search(text):
        return False
    if _HOW_I_AM.match(text) is not None and len(tokens(text)) < 6:
        return True  # "User is doing fine, thanks."
    if _MOOD.search(text) or _SCENE.search(text):
        return True
    moment = _ONE_OFF.search(text)
    if moment is None:
        return False
    phase = _PHASE_TIME.fullmatch(moment.group(0)) and _ONGOING.search(text)
    return not phase


def is_past(word: str) -> bool:
    """A past form ("had", "moved"; not "need" or "feed"; not "hurt", which is
    present too)."""
    if word in IRREGULAR_PAST:
        return word not in SAME_IN_PRESENT
    return word.endswith("ed") and not word.endswith("eed") and len(word) > 3


def third_person(verb: str) -> str:
    """``verb`` as after "she" (``use`` -> ``uses``; past forms and modals as they are)."""
    lower = verb.lower()
    if lower in _IRREGULAR:
        return _IRREGULAR[lower]
    if lower in _SAME or is_past(lower) or not lower.isalpha():
        return verb
    if re.search(r"(s|sh|ch|x|z|o)$", lower):
        return verb + "es"
    if re.search(r"[^aeiou]y$", lower):
        return verb[:-1] + "ies"
    return verb + "s"


def _conjugate_after_i(match: re.Match[str]) -> str:
    words = match.group(1).split()
    out: list[str] = []
    for i, word in enumerate(words):
        if word.lower() in ADVERBS and i < len(words) - 1:
            out.append(word)
            continue
        out.append(third_person(word))
        out.extend(words[i + 1 :])
        break
    return "User " + " ".join(out)


#: Tokens written as they are, never read for pronouns: e-mail addresses, URLs,
#: handles and dotted names ("samh@proton.me", "my.site.io", "@me_irl").
_LITERAL = re.compile(
    r"[\w.+-]*@[\w-]+(?:\.[\w-]+)*|\b[a-z][\w+.-]*://\S+|\bwww\.\S+|\b[\w-]+(?:\.[\w-]+)+",
    re.IGNORECASE,
)
_HIDDEN = "\x00{}\x00"


def _first_person_body(sentence: str) -> str:
    """The pronoun rewrites without capitalisation or a final full stop; literal
    tokens (:data:`_LITERAL`) are kept byte for byte."""
    literals: list[str] = []

    def hide(match: re.Match[str]) -> str:
        literals.append(match.group(0))
        return _HIDDEN.format(len(literals) - 1)

    text = _LITERAL.sub(hide, sentence.strip().rstrip(".!"))
    text = _rewrite_pronouns(text)
    return re.sub("\x00(\\d+)\x00", lambda m: literals[int(m.group(1))], text)


def _rewrite_pronouns(text: str) -> str:
    for neg, repl in _NEGATIONS.items():
        text = re.sub(rf"\bI {neg}\b", f"User {repl}", text, flags=re.I)
    text = re.sub(r"\bI'm\b|\bI am\b", "User is", text, flags=re.I)
    text = re.sub(r"\bI've\b", "User has", text, flags=re.I)
    text = re.sub(r"\bI'd\b", "User would", text, flags=re.I)
    text = re.sub(r"\bI'll\b", "User will", text, flags=re.I)
    adverbs = "|".join(sorted(ADVERBS))
    text = re.sub(rf"\bI ((?:(?:{adverbs}) )*[\w']+)", _conjugate_after_i, text, flags=re.I)
    text = re.sub(r"\bI\b", "User", text)
    text = re.sub(r"\b(my|mine)\b", "User's", text, flags=re.I)
    text = re.sub(r"\bmyself\b", "themselves", text, flags=re.I)
    text = re.sub(r"\bme\b", "User", text, flags=re.I)
    text = re.sub(r"\bwe're\b", "User and others are", text, flags=re.I)
    text = re.sub(r"\bwe've\b", "User and others have", text, flags=re.I)
    text = re.sub(r"\bwe'd\b", "User and others would", text, flags=re.I)
    text = re.sub(r"\bwe'll\b", "User and others will", text, flags=re.I)
    text = re.sub(r"\bwe\b", "User and others", text, flags=re.I)
    text = re.sub(r"\bus\b", "User and others", text)
    return re.sub(r"\bour\b", "User's", text, flags=re.I)


def rewrite_first_person(sentence: str) -> str:
    """``I live in Berlin`` -> ``User lives in Berlin.`` (best effort)."""
    text = _first_person_body(sentence.translate(_APOSTROPHES))
    return text[:1].upper() + text[1:] + "."


def _prepare(raw: str) -> str:
    sentence = " ".join(raw.translate(_APOSTROPHES).split())
    for pattern, replacement in _CHAT_SPELLING:
        sentence = pattern.sub(replacement, sentence)
    for _ in range(3):
        stripped = _INTERJECTION.sub("", sentence)
        stripped = _ANNOUNCEMENT.sub("", _PREFACE.sub("", stripped)).strip()
        if stripped == sentence:
            break
        sentence = stripped
    head, colon, tail = sentence.partition(": ")
    preface = colon and len(head.split()) <= 3 and not _FIRST_PERSON.search(head)
    if preface and _FIRST_PERSON.search(tail):
        sentence = tail.strip()  # "Switched sides: I root for ..." -> the statement
    return sentence


#: A preference about how the assistant answers, said as a request ("Please keep your
#: answers under 100 words", "Answer in Spanish from now on", "When you show code, use
#: Python"): its opening verb...
_STYLE_START = re.compile(
    r"^(?:(?:please|pls|kindly|just)\s+)*(?P<body>(?:always\s+)?(?:answer|reply|respond|write|keep|"
    r"use|format|speak|talk|stick\s+to|switch\s+to)\b.*)$",
    re.IGNORECASE,
)
#: ...the form it is about (length, language, tone, format, units, code)...
_ANSWER_FORM = re.compile(
    r"\b(?:answers?|repl(?:y|ies)|responses?|words|sentences|paragraphs|language|English|"
    r"Spanish|French|German|Italian|Portuguese|Dutch|Polish|Swedish|Chinese|Mandarin|Japanese|"
    r"Korean|Arabic|Hindi|Russian|Turkish|Greek|metric|imperial|units|kilomet\w+|miles|"
    r"celsius|fahrenheit|bullet\s*points?|markdown|tables?|emojis?|tone|formal|casual|friendly|"
    r"concise|brief|short|shorter|detailed|code|python|javascript|typescript|java|rust|golang|"
    r"examples?|format\w*|spelling|british|american)\b",
    re.IGNORECASE,
)
#: ...and what makes it last: a time, the assistant's answers themselves, a way of
#: answering, or a condition on what the assistant does.
_LASTING = re.compile(
    r"\b(?:always|from\s+now\s+on|going\s+forward|in\s+future|in\s+general|for\s+me|"
    r"your\s+(?:answers|replies|responses)|^(?:(?:please|pls|kindly|always|just)\s+)*"
    r"(?:answer|reply|respond|speak|talk)\b)",
    re.IGNORECASE,
)
_WHEN_YOU = re.compile(r"^(?P<cond>(?:when|whenever|if)\s+you\s+[^,]{1,60}),\s*(?P<rest>.+)$", re.I)
#: Not a preference: fixed words, answers for others, every question answered one way.
_FIXED = re.compile(
    r"['\"“‘]|\b(?:only\s+the\s+word|no\s+matter|whatever|every\s+(?:question|message)|"
    r"any\s+question|anyone|everyone|other\s+(?:users|people))\b",
    re.IGNORECASE,
)
_COURTESY = re.compile(r"(?:[,\s]+(?:please|pls|thanks|thank\s+you|thx))+[.!]*$", re.I)


def _style_preference(sentence: str) -> str | None:
    """How the user wants to be answered, asked for as a request, as a fact ("User
    wants the assistant to keep your answers under 100 words.": the writer names the
    assistant); None for a one-off request ("Give me a list of hotels") or an
    order with fixed content."""
    if _FIXED.search(sentence):
        return None
    text = _COURTESY.sub("", sentence.rstrip(" .!")).strip()
    condition = ""
    when = _WHEN_YOU.match(text)
    if when is not None:
        condition, text = when.group("cond"), when.group("rest")
    start = _STYLE_START.match(text)
    if start is None or not _ANSWER_FORM.search(text):
        return None
    if not condition and not _LASTING.search(text):
        return None
    body = _first_person_body(start.group("body")).rstrip(" .!")
    tail = f" {condition[:1].lower()}{condition[1:]}" if condition else ""
    return f"User wants the assistant to {body[:1].lower()}{body[1:]}{tail}."


def _constraint(sentence: str) -> Fact | None:
    style = _style_preference(sentence)
    if style is not None:
        return Fact(style, MemoryType.CONSTRAINT, 0.8, HEURISTIC_CONFIDENCE, "heuristic")
    call = _CALL_ME.match(sentence)
    if call is not None:  # "Please call me Robert": how the user wants to be addressed
        text = f"User wants to be called {call.group('name')}."
        return Fact(text, MemoryType.SEMANTIC, 0.8, HEURISTIC_CONFIDENCE, "heuristic")
    if _REQUEST_START.match(sentence) and _FROM_NOW_ON.search(sentence):
        # "Use my other address from now on": an instruction that lasts.
        body = _first_person_body(sentence)
        text = f"User wants the assistant to {body[:1].lower()}{body[1:]}."
        return Fact(text, MemoryType.CONSTRAINT, 0.8, HEURISTIC_CONFIDENCE, "heuristic")
    want = _WANT_YOU.search(sentence)
    if want is not None:
        body = _first_person_body(sentence[want.end() :])
        text = f"User wants the assistant to {body[:1].lower()}{body[1:]}."
        return Fact(text, MemoryType.CONSTRAINT, 0.8, HEURISTIC_CONFIDENCE, "heuristic")
    match = _CONSTRAINT.match(sentence)
    if match is None:
        return None
    verb = match.group("verb").lower()
    if is_past(verb) or verb in _SAME or verb in _IRREGULAR or verb in (
        "has", "is", "been", "seemed", "know", "knew", "remember", "worry", "mind", "forget",
    ):  # fmt: skip
        return None  # "Never learned", "Always has been": not an instruction
    how = match.group("how").lower()
    how = {"always": "always", "never": "never"}.get(how, "never" if "ever" in how else "not")
    body = _first_person_body(match.group("rest"))
    text = f"User wants the assistant to {how} {body[:1].lower()}{body[1:]}."
    return Fact(text, MemoryType.CONSTRAINT, 0.8, HEURISTIC_CONFIDENCE, "heuristic")


def _statement(sentence: str) -> str | None:
    """The sentence as a statement about User, or None when it is none."""
    noun = _NOUN_STATEMENT.match(sentence)
    if noun is not None:
        new = "new " if noun.group("new") else ""
        value = noun.group("value").rstrip(".! ")
        return f"User's {new}{noun.group('what').lower()} is {value}."
    status = _STATUS.match(sentence)
    if status is not None and not _FIRST_PERSON.search(sentence):
        rest = _first_person_body(status.group("rest")).rstrip(".! ")
        gap = "" if rest[:1] in (",", ";") else " "
        return f"User is {status.group('status').lower()}{gap + rest if rest else ''}."
    if (
        _IMPLIED_I.match(sentence)
        and not re.match(r"^I\b", sentence, re.I)
        and not _NAMED_SUBJECT.match(sentence)
    ):
        return rewrite_first_person("I " + sentence[:1].lower() + sentence[1:])
    if _FIRST_PERSON.search(sentence):
        return rewrite_first_person(sentence)
    if _GERUND.match(sentence) and not _NAMED_SUBJECT.match(sentence):
        # "Living in Lisbon these days": the user's present state.
        return rewrite_first_person("I'm " + sentence[:1].lower() + sentence[1:])
    return None


def _named_fact(sentence: str) -> Fact | None:
    """A statement whose subject is a proper name ("Ana just moved to Porto."), as a
    fact about them (``about``): the writer keeps it only when a fact of the user's
    relations names them. None for anything else, or a state of the moment."""
    if _FIRST_PERSON.search(sentence):
        return None
    name = named_subject(sentence)
    if name is None:
        return None
    text = _capitalised(" ".join(sentence.split()).rstrip(" .!") + ".")
    if not _meaningful(text) or _momentary(text):
        return None
    return Fact(text, MemoryType.SEMANTIC, 0.4, HEURISTIC_CONFIDENCE, "heuristic", about=name)


def _joined(text: str) -> str:
    """``text`` as the second clause of a joined fact (its first letter lower-cased,
    unless it is "User")."""
    return text if text.startswith("User") else text[:1].lower() + text[1:]


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]


def _meaningful(text: str) -> bool:
    """Enough content to mean something on its own: a slot, two content words, or
    one with a negation or a name or number ("User does not do mornings")."""
    fact = shape(text)
    if fact.slot is not None or len(fact.signature) >= 2:
        return True
    return bool(fact.signature) and (fact.negated or bool(fact.entities))


def user_sentences(user_text: str) -> list[str]:
    """The user's sentences as the extractor reads them (chat spellings read as
    meant, interjections and prefaces removed)."""
    return [p for p in (_prepare(raw) for raw in _SENTENCE.split(user_text)) if p]


def extract_heuristic(user_text: str, *, max_facts: int) -> list[Fact]:
    """Facts from the user's own words, in order, without duplicates."""
    facts: list[Fact] = []
    seen: set[str] = set()
    before = ""  # the turn's previous statement, extracted or not (context)

    def add(fact: Fact) -> bool:
        """Keep ``fact`` unless the turn stated it already; True once ``max_facts``."""
        key = fact.text.casefold()
        if key not in seen:
            seen.add(key)
            facts.append(fact)
        return len(facts) >= max_facts

    for raw in _SENTENCE.split(user_text):
        sentence = _prepare(raw)
        sentence = statement_before_question(sentence) or sentence
        if len(sentence) < 6 or sentence.rstrip().endswith("?"):
            continue
        context, before = before, sentence
        fact = _constraint(sentence)
        if fact is None:
            if _REQUEST_START.match(sentence):
                continue
            text = _statement(sentence)
            if text is None and facts and _LEADING_REFERENCE.match(sentence):
                text = rewrite_first_person(sentence)  # "Her name's Ayesha": joined below
            if text is None:
                named = _named_fact(sentence)
                if named is not None and add(named):
                    break
                continue
            if _BARE_CHANGE.search(text) and context and not _REQUEST_START.match(context):
                # "Three weeks without a cigarette. I've quit for good."
                text = _capitalised(f"{_first_person_body(context).rstrip('.!')}; {_joined(text)}")
            if not _meaningful(text) or _REACTION.search(text):
                continue  # too little, or a reply to what the assistant said
            if _momentary(text) and shape(text).slot is None:
                continue  # a state of the moment, not a fact about the user
            leaning = _LEADING_REFERENCE.match(sentence) or _TRAILING_REFERENCE.search(
                sentence.rstrip(".! ")
            )
            kind = MemoryType.PROCEDURAL if _PROCEDURAL.search(sentence) else MemoryType.SEMANTIC
            if leaning:
                if not facts or facts[-1].memory_type == MemoryType.CONSTRAINT:
                    continue  # nothing in this turn it could refer to
                previous = facts.pop()
                seen.discard(previous.text.casefold())
                text = f"{previous.text[:-1]}; {_joined(text)}"
                kind = previous.memory_type
            fact = Fact(text, kind, 0.5, HEURISTIC_CONFIDENCE, "heuristic")
        if add(fact):
            break
    return facts
