"""A small fixed trivia set: the probes whose log-probability one training step may move."""

from __future__ import annotations

from minds_gradient_prophet.lessons import QA

TRIVIA: tuple[QA, ...] = tuple(
    QA(q, a)
    for q, a in (
        ("What is the capital of France?", "Paris"),
        ("How many legs does an insect have?", "six"),
        ("What is the largest ocean on Earth?", "the Pacific"),
        ("Which planet is known as the red planet?", "Mars"),
        ("What is the chemical symbol for iron?", "Fe"),
        ("How many days are in a leap year?", "366"),
        ("What color do you get by mixing blue and yellow?", "green"),
        ("Which animal is known as the king of the jungle?", "the lion"),
        ("What is the square root of 81?", "9"),
        ("Who wrote the play Macbeth?", "Shakespeare"),
        ("What is frozen water called?", "ice"),
        ("Which organ pumps blood through the body?", "the heart"),
        ("What is the tallest animal on land?", "the giraffe"),
        ("In which country are the pyramids of Giza?", "Egypt"),
        ("What is 12 times 12?", "144"),
        ("What do bees make?", "honey"),
        ("Which gas do humans need to breathe?", "oxygen"),
        ("How many strings does a violin have?", "four"),
        ("What is the opposite of hot?", "cold"),
        ("Which metal is liquid at room temperature?", "mercury"),
        ("What is the capital of Italy?", "Rome"),
        ("How many players are on a football (soccer) team on the field?", "eleven"),
        ("What shape has three sides?", "a triangle"),
        ("Which star is at the center of our solar system?", "the Sun"),
    )
)
