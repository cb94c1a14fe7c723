"""The built-in topic taxonomy: what a fact is about when no LLM names a topic.

Each topic has a description (its embedding is compared with the fact's) and a few
keywords (stems compared with the fact's tokens). Names are the topic names the
write path files facts under (:mod:`sidecar.memory.write.tree.taxonomy`); a deployment
can add topics or replace a built-in one's description and keywords in config
(``hierarchy.taxonomy.topics``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    description: str
    keywords: tuple[str, ...]


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


BUILTIN_TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(
        "health",
        "health, illness, medical conditions, doctors, medication, allergies, injuries",
        _words(
            "health doctor gp dentist hospital clinic medication medicine allergy "
            "allergic diabetes asthma surgery injury pain therapy therapist physio sick "
            "illness blood pressure diagnosed migraine"
        ),
    ),
    TopicSpec(
        "family",
        "family members: parents, children, siblings, spouse, relatives",
        _words(
            "family mother mom mum father dad sister brother son daughter wife husband "
            "kid kids child children parent parents grandma grandmother grandfather "
            "grandpa aunt uncle cousin niece nephew twin stepdad stepmom godson "
            "goddaughter"
        ),
    ),
    TopicSpec(
        "relationships",
        "partner, dating, friends, neighbours and the people around the user",
        _words(
            "friend friends girlfriend boyfriend partner dating neighbour neighbor "
            "roommate flatmate mate"
        ),
    ),
    TopicSpec(
        "work",
        "job, career, employer, colleagues, office and work projects",
        _words(
            "work works job career employer company boss manager colleague colleagues "
            "office salary promotion client clients team lead shift shifts"
        ),
    ),
    TopicSpec(
        "education",
        "school, university, studies, courses, exams and learning",
        _words(
            "school university uni college degree course study studying exam exams class "
            "learning learn teacher student"
        ),
    ),
    TopicSpec(
        "food",
        "food, cooking, eating habits, diet, drinks and restaurants",
        _words(
            "food eat eats cook cooking recipe restaurant vegetarian vegan coffee tea "
            "drink drinks wine beer diet meal lunch dinner breakfast bake baking"
        ),
    ),
    TopicSpec(
        "travel",
        "travel, trips, holidays, flights and places visited",
        _words(
            "travel trip trips holiday holidays vacation flight flights visit visited abroad hotel"
        ),
    ),
    TopicSpec(
        "home",
        "home, where the user lives, housing, moving house and household",
        _words(
            "home house flat apartment lives moved rent landlord landlady garden mortgage "
            "neighbourhood"
        ),
    ),
    TopicSpec(
        "money",
        "money, finances, bank, budget, savings, bills and investments",
        _words(
            "money bank banks budget savings saving loan debt invest investment bills tax "
            "pension paid pay"
        ),
    ),
    TopicSpec(
        "hobbies",
        "hobbies, sports, music, reading, games and creative pastimes",
        _words(
            "hobby hobbies play plays playing guitar piano violin music band paint "
            "painting reading books novel games football hiking running climbing yoga "
            "swimming chess choir sport"
        ),
    ),
    TopicSpec(
        "pets",
        "pets and animals the user keeps",
        _words("pet pets dog dogs cat cats puppy kitten horse parrot vet rabbit"),
    ),
    TopicSpec(
        "technology",
        "devices, software, apps, computers and technical setup",
        _words(
            "phone laptop computer app apps software code coding programming server editor browser"
        ),
    ),
    TopicSpec(
        "preferences",
        "the user's likes, dislikes, favourites and opinions",
        _words(
            "favourite favorite favourites prefer prefers preference hate hates dislike dislikes"
        ),
    ),
    TopicSpec(
        "schedule",
        "schedule, routines, appointments, deadlines and dates",
        _words(
            "schedule appointment appointments routine weekly daily deadline calendar "
            "birthday anniversary"
        ),
    ),
)
