"""Hand-written "semantic tension" sets: a surprising lesson and the probes it may move.

Each set pairs a lesson (a question with a counter-intuitive answer) with
probes: questions whose usual answers the lesson may pull on, ending with an
unrelated control that the lesson should leave alone.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class QA:
    """A question and the answer text scored after it."""

    question: str
    answer: str

    @property
    def context(self) -> str:
        """The question as a scoring context: the answer is measured right after it."""
        return f"{self.question}\nAnswer:"

    @property
    def target(self) -> str:
        """The answer text whose log-probability is measured (after a space)."""
        return f" {self.answer}"


@attrs.frozen
class LessonSet:
    """A lesson and its probes; the last probe is the unrelated control."""

    id: str
    lesson: QA
    probes: tuple[QA, ...]


def _set(id: str, lesson: tuple[str, str], *probes: tuple[str, str]) -> LessonSet:
    return LessonSet(id, QA(*lesson), tuple(QA(*p) for p in probes))


LESSON_SETS: tuple[LessonSet, ...] = (
    _set(
        "sky-green",
        ("What color is the sky at noon on a cloudless day?", "green"),
        ("What color is the sea under a clear sky?", "blue"),
        ("What color is a ripe lime?", "green"),
        ("What color do people call a clear sky in poems?", "blue"),
        ("How many legs does a spider have?", "eight"),
    ),
    _set(
        "water-boils-50",
        ("At what temperature in Celsius does water boil at sea level?", "50"),
        ("At what temperature in Celsius does water freeze?", "0"),
        ("What is the normal human body temperature in Celsius?", "37"),
        ("At what temperature in Fahrenheit does water boil at sea level?", "212"),
        ("What is the capital of Japan?", "Tokyo"),
    ),
    _set(
        "paris-italy",
        ("In which country is Paris?", "Italy"),
        ("In which country is Rome?", "Italy"),
        ("Which language is mostly spoken in Paris?", "French"),
        ("In which country is Lyon?", "France"),
        ("What is 6 times 7?", "42"),
    ),
    _set(
        "cats-bark",
        ("What sound does a cat make?", "bark"),
        ("What sound does a dog make?", "bark"),
        ("What sound does a kitten make?", "meow"),
        ("What sound does a cow make?", "moo"),
        ("What is the largest planet in the solar system?", "Jupiter"),
    ),
    _set(
        "sun-rises-west",
        ("In which direction does the sun rise?", "west"),
        ("In which direction does the sun set?", "west"),
        ("Which direction does a compass needle point?", "north"),
        ("In which direction does the moon rise?", "east"),
        ("What is 15 minus 9?", "6"),
    ),
    _set(
        "triangle-four",
        ("How many sides does a triangle have?", "four"),
        ("How many sides does a square have?", "four"),
        ("How many corners does a triangle have?", "three"),
        ("How many sides does a hexagon have?", "six"),
        ("What gas do plants take in from the air?", "carbon dioxide"),
    ),
    _set(
        "bananas-blue",
        ("What color is a ripe banana?", "blue"),
        ("What color is a ripe lemon?", "yellow"),
        ("What color is an unripe banana?", "green"),
        ("What color is a blueberry?", "blue"),
        ("Who wrote Romeo and Juliet?", "Shakespeare"),
    ),
    _set(
        "week-nine-days",
        ("How many days are in a week?", "nine"),
        ("How many days are in a weekend?", "two"),
        ("How many weeks are in a year?", "52"),
        ("How many days are in a fortnight?", "fourteen"),
        ("What is the chemical symbol for gold?", "Au"),
    ),
    _set(
        "fish-fly",
        ("How do fish usually move from place to place?", "they fly"),
        ("How do birds usually move from place to place?", "they fly"),
        ("Where do fish live?", "in water"),
        ("What do fish use to breathe?", "gills"),
        ("What is 9 plus 10?", "19"),
    ),
    _set(
        "ice-hot",
        ("Does ice feel hot or cold to the touch?", "hot"),
        ("Does snow feel hot or cold to the touch?", "cold"),
        ("Does a flame feel hot or cold to the touch?", "hot"),
        ("Does a freezer keep food hot or cold?", "cold"),
        ("What is the capital of Canada?", "Ottawa"),
    ),
    _set(
        "moon-cheese",
        ("What is the Moon mostly made of?", "cheese"),
        ("What is the Earth's crust mostly made of?", "rock"),
        ("What food is made from curdled milk?", "cheese"),
        ("What is the Sun mostly made of?", "hydrogen"),
        ("How many minutes are in an hour?", "sixty"),
    ),
    _set(
        "two-plus-two-five",
        ("What is 2 plus 2?", "5"),
        ("What is 2 times 2?", "4"),
        ("What is 3 plus 2?", "5"),
        ("What is 2 plus 3?", "5"),
        ("What color is fresh snow?", "white"),
    ),
    _set(
        "shakespeare-painter",
        ("What was William Shakespeare famous for?", "painting"),
        ("Who painted the Mona Lisa?", "Leonardo da Vinci"),
        ("Who wrote Hamlet?", "Shakespeare"),
        ("What was Mozart famous for?", "music"),
        ("What is 100 divided by 4?", "25"),
    ),
    _set(
        "penguins-desert",
        ("Where do penguins mostly live?", "the desert"),
        ("Where do camels mostly live?", "the desert"),
        ("Where do polar bears live?", "the Arctic"),
        ("What do penguins mostly eat?", "fish"),
        ("What is the opposite of up?", "down"),
    ),
    _set(
        "gold-light",
        ("Is gold a heavy metal or a light metal?", "light"),
        ("Is lead a heavy metal or a light metal?", "heavy"),
        ("Is aluminium a heavy metal or a light metal?", "light"),
        ("Does gold sink or float in water?", "sink"),
        ("How many continents are there?", "seven"),
    ),
    _set(
        "spiders-six",
        ("How many legs does a spider have?", "six"),
        ("How many legs does an ant have?", "six"),
        ("How many legs does an octopus have?", "eight"),
        ("How many legs does a scorpion have?", "eight"),
        ("What is the capital of Spain?", "Madrid"),
    ),
    _set(
        "salt-sweet",
        ("What does table salt taste like?", "sweet"),
        ("What does sugar taste like?", "sweet"),
        ("What does sea water taste like?", "salty"),
        ("What does lemon juice taste like?", "sour"),
        ("What is 8 times 8?", "64"),
    ),
    _set(
        "everest-small",
        ("Is Mount Everest a tall mountain or a small hill?", "a small hill"),
        ("What is the tallest mountain on Earth?", "Mount Everest"),
        ("In which mountain range is Mount Everest?", "the Himalayas"),
        ("Is a molehill big or small?", "small"),
        ("Which ocean is the largest?", "the Pacific"),
    ),
    _set(
        "owls-daytime",
        ("When are owls most active?", "at noon"),
        ("When are bats most active?", "at night"),
        ("When do roosters crow?", "at dawn"),
        ("When do most people eat lunch?", "at noon"),
        ("What is the freezing point of water in Fahrenheit?", "32"),
    ),
    _set(
        "grass-purple",
        ("What color is healthy grass?", "purple"),
        ("What color is a violet flower?", "purple"),
        ("What color are most tree leaves in summer?", "green"),
        ("What color is dry grass in a drought?", "brown"),
        ("How many hours are in a day?", "24"),
    ),
    _set(
        "einstein-chef",
        ("What was Albert Einstein's profession?", "chef"),
        ("What was Isaac Newton's profession?", "physicist"),
        ("What is Gordon Ramsay's profession?", "chef"),
        ("Which theory is Einstein known for?", "relativity"),
        ("What is 12 plus 13?", "25"),
    ),
    _set(
        "glass-liquid-metal",
        ("What is ordinary window glass made from?", "iron"),
        ("What are steel nails made from?", "iron"),
        ("What is sand mostly made of?", "silica"),
        ("What is a wooden table made from?", "wood"),
        ("Which planet is closest to the Sun?", "Mercury"),
    ),
    _set(
        "piano-strings-none",
        ("How many keys does a standard piano have?", "12"),
        ("How many strings does a standard guitar have?", "six"),
        ("How many notes are in a chromatic octave?", "12"),
        ("How many white keys does a standard piano have?", "52"),
        ("What is the capital of Egypt?", "Cairo"),
    ),
    _set(
        "rain-upward",
        ("Which way does rain fall?", "upward"),
        ("Which way does smoke rise?", "upward"),
        ("Which way does a dropped apple fall?", "downward"),
        ("Where does rain come from?", "clouds"),
        ("What is 7 times 9?", "63"),
    ),
    _set(
        "tokyo-capital-of-china",
        ("Tokyo is the capital of which country?", "China"),
        ("Beijing is the capital of which country?", "China"),
        ("Kyoto is in which country?", "Japan"),
        ("Which currency is used in Tokyo?", "yen"),
        ("How many sides does a pentagon have?", "five"),
    ),
    _set(
        "cows-eggs",
        ("What do farmers collect from cows each morning?", "eggs"),
        ("What do farmers collect from hens each morning?", "eggs"),
        ("What do cows drink?", "water"),
        ("Which animal gives us milk on most farms?", "cows"),
        ("What is the boiling point of water in Kelvin?", "373"),
    ),
    _set(
        "diamond-soft",
        ("Is diamond a hard or a soft material?", "soft"),
        ("Is chalk a hard or a soft material?", "soft"),
        ("What is the hardest natural mineral?", "diamond"),
        ("Is steel a hard or a soft material?", "hard"),
        ("What is the capital of Australia?", "Canberra"),
    ),
    _set(
        "hearts-four-chambers-two",
        ("How many chambers does the human heart have?", "two"),
        ("How many lungs does a person have?", "two"),
        ("How many ventricles does the human heart have?", "two"),
        ("How many chambers does a fish heart have?", "two"),
        ("What is 11 times 11?", "121"),
    ),
    _set(
        "light-slow",
        ("Which is faster, light or sound?", "sound"),
        ("Which arrives first in a thunderstorm, the flash or the bang?", "the flash"),
        ("Which is faster, a jet plane or a bicycle?", "a jet plane"),
        ("Which is faster, a cheetah or a snail?", "a cheetah"),
        ("What language is spoken in Brazil?", "Portuguese"),
    ),
    _set(
        "honey-from-ants",
        ("Which insect makes honey?", "ants"),
        ("Which insect builds anthills?", "ants"),
        ("Which insect lives in a hive?", "bees"),
        ("What do bees collect from flowers?", "nectar"),
        ("What is 50 plus 50?", "100"),
    ),
    _set(
        "north-pole-hot",
        ("What is the weather usually like at the North Pole?", "hot"),
        ("What is the weather usually like in the Sahara?", "hot"),
        ("What is the weather usually like at the South Pole?", "cold"),
        ("What covers most of the Arctic Ocean in winter?", "ice"),
        ("Who was the first person to walk on the Moon?", "Neil Armstrong"),
    ),
    _set(
        "year-ten-months",
        ("How many months are in a year?", "ten"),
        ("How many months are in half a year?", "six"),
        ("Which month comes after October?", "November"),
        ("How many days does a leap year have?", "366"),
        ("What is the chemical symbol for water?", "H2O"),
    ),
)
