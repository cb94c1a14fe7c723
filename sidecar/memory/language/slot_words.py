"""Word lists of the slot rules (:mod:`sidecar.memory.language.slots`): attributes,
professions, diets, pets and the people a user's facts can be about."""

from __future__ import annotations

from sidecar.memory.language.lexicon import PARENTS, PARTNERS

#: Single-valued attributes stated as "User's <attribute> is <value>".
ATTRIBUTES = (
    r"surname|last\s+name|first\s+name|middle\s+name|maiden\s+name|full\s+name|"
    r"gp|doctor|dentist|therapist|landlord|boss|manager|address|postcode|zip\s+code|"
    r"job\s+title|title|salary|height|weight|blood\s+type|star\s+sign|shoe\s+size|"
    r"pronouns|username|handle|employer|company|university|school|hometown"
)
PROFESSIONS = (
    "nurse|teacher|doctor|physician|surgeon|engineer|developer|programmer|designer|"
    "lawyer|attorney|accountant|chef|cook|student|architect|pharmacist|journalist|"
    "writer|author|electrician|plumber|firefighter|paramedic|dentist|vet|veterinarian|"
    "scientist|researcher|manager|consultant|barista|mechanic|pilot|photographer|"
    "musician|artist|translator|librarian|therapist|carpenter|farmer|police officer|"
    "software engineer|data scientist|professor|lecturer|midwife|social worker|"
    "paralegal|baker|bartender|waiter|waitress|cashier|driver|courier|analyst|"
    "economist|historian|illustrator|animator|editor|tutor|coach|trainer|"
    "physiotherapist|psychologist|radiologist|optician|surveyor|welder|"
    "product manager|project manager|civil servant|postdoc|phd student|intern"
)
DIETS = "vegetarian|vegan|pescatarian|pescetarian|keto|carnivore|omnivore|flexitarian"
PETS = "dog|cat|puppy|kitten|rabbit|bunny|hamster|parrot|budgie|tortoise|turtle|horse|snake|lizard|ferret|guinea pig|goldfish|fish"  # noqa: E501
#: People and animals of the user's whose name is an attribute of theirs.
RELATIONS = (
    r"daughter|son|sister|brother|wife|husband|partner|spouse|mum|mom|mother|dad|father|"
    r"cousin|niece|nephew|aunt|uncle|grandma|grandpa|grandmother|grandfather|kid|child|"
    r"boyfriend|girlfriend|fianc[ée]e?|best\s+friend|dog|cat|puppy|kitten|rabbit|horse"
)
#: Relations of whom the user has one at a time: another name is a contradiction.
SINGLE_RELATIONS = frozenset((*PARTNERS, "fiancée", *PARENTS, "dog", "cat"))
#: "User is a <noun>" names an occupation when the noun looks like one ...
OCCUPATION_HEAD = r"[a-z-]+(?:er|or|ist|ian|ant|ent|eon|ess|ic)"
#: ... and is none of these.
NOT_OCCUPATIONS = frozenset(
    """fan person believer lover member user owner speaker player reader learner
    beginner smoker drinker runner swimmer climber cyclist gamer supporter regular
    winner teenager foreigner stranger newcomer partner patient client resident parent
    sister brother mother father daughter son cousin neighbour neighbor other number
    order letter introvert extrovert optimist pessimist perfectionist procrastinator
    insomniac diabetic vegetarian vegan native local visitor tourist traveller traveler
    collector fighter survivor donor sleeper eater cook baker walker hiker skier
    surfer dancer singer writer talker thinker worrier planner fanatic addict
    enthusiast geek nerd major pescatarian pescetarian flexitarian""".split()
)
NUMBER_WORDS = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten)"
#: What a thing the user gives up takes with it: "gave up caffeine" ends a memory of
#: four espressos a day. The members are the words a memory of the habit names.
KINDS_OF: dict[str, str] = {
    "caffeine": "coffee coffees espresso espressos latte lattes cappuccino cappuccinos "
    "americano americanos macchiato mocha cortado cola coke redbull",
    "coffee": "espresso espressos latte lattes cappuccino cappuccinos americano americanos "
    "macchiato mocha cortado",
    "alcohol": "beer beers lager ale wine wines whisky whiskey vodka gin rum tequila "
    "prosecco champagne cider cocktail cocktails pint pints",
    "booze": "beer beers lager ale wine wines whisky whiskey vodka gin rum tequila "
    "prosecco champagne cider cocktail cocktails pint pints",
    "meat": "steak steaks beef pork chicken bacon ham lamb burger burgers sausage sausages",
    "dairy": "milk cheese yoghurt yogurt butter cream",
    "sugar": "sweets chocolate candy soda fizzy cake cakes biscuits cookies",
    "social media": "instagram tiktok twitter facebook snapchat reddit threads",
    "gluten": "bread pasta",
    "nicotine": "cigarette cigarettes cigar cigars vape vapes vaping snus",
}
#: Things a user has one of at a time, by what a question calls them: the kind's
#: own words, then the names that are one. "Switched my account to Monzo" after
#: "I bank with Barclays" swaps one bank for another; a question about "my bank"
#: should find either. Names the embedding model does not know as banks or phones.
PRODUCT_KINDS: dict[str, tuple[str, str]] = {
    "bank": (
        "bank banks banking",
        "barclays hsbc monzo lloyds natwest santander revolut starling halifax nationwide "
        "n26 chase citibank wells fargo",
    ),
    "phone": (
        "phone smartphone mobile",
        "iphone pixel galaxy oneplus nokia motorola xiaomi huawei fairphone",
    ),
    "password manager": (
        "password",
        "lastpass bitwarden 1password dashlane keepass keepassxc",
    ),
    "coffee order": (
        "coffee",
        "espresso espressos latte lattes cappuccino cappuccinos americano americanos "
        "macchiato mocha cortado",
    ),
    "browser": ("browser", "chrome firefox safari brave vivaldi opera"),
    "email provider": ("email e-mail mail", "gmail outlook protonmail fastmail"),
    "code editor": ("editor ide", "vscode vim neovim emacs pycharm intellij"),
}
#: Words that end a value though they are not function words ("swimming instead").
VALUE_STOP = frozenset(
    """instead now again every daily weekly monthly too anymore lately recently most
    each mostly only full-time part-time already""".split()
)
#: Units of a measured attribute, written one way ("90 kilos" is "90kg").
UNIT_NAMES = {
    "kg": "kg", "kgs": "kg", "kilo": "kg", "kilos": "kg", "kilogram": "kg", "kilograms": "kg",
    "lb": "lb", "lbs": "lb", "pound": "lb", "pounds": "lb", "stone": "st", "st": "st",
    "m": "m", "metre": "m", "metres": "m", "meter": "m", "meters": "m", "cm": "cm",
    "foot": "ft", "feet": "ft", "ft": "ft", "'": "ft", "inches": "in", "in": "in", '"': "in",
}  # fmt: skip
#: Things a favourite is of that mean the same.
THINGS = {
    "meal": "food", "dish": "food", "cuisine": "food", "beverage": "drink", "tipple": "drink",
    "color": "colour", "movie": "film", "last name": "surname",
}  # fmt: skip
