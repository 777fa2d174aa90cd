"""The made-up text ``minds-small`` learns from: words, numbers, sums and chat turns that follow a stated format.

Everything is drawn from a seeded ``random.Random``, so a seed gives the same corpus on every machine. Each
item is one document: either plain text (sentences about common things, counting, sums) or a conversation
rendered in ChatML, where the user (and often a system message) says what to reply and in which shape, and
the assistant's reply follows it. What it teaches is deliberately generic: write whole words and integers,
copy a format described in the prompt (header lines such as ``ANSWER: <...>``, comma-separated numbers,
a JSON array), stop with ``<|im_end|>``. Replies are made from the prompt's own instructions, never from
any environment's scoring code, so a format the model has never seen can still be followed by analogy.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

__all__ = ["corpus", "render_chat"]

_NOUNS = (
    "apple", "river", "chair", "cloud", "horse", "bread", "stone", "candle", "garden", "mirror", "pencil", "window",
    "bottle", "forest", "bridge", "kettle", "ladder", "pillow", "rabbit", "tiger", "violin", "wallet", "anchor",
    "basket", "carpet", "desert", "engine", "feather", "guitar", "hammer", "island", "jacket", "lemon", "magnet",
    "needle", "orange", "planet", "rocket", "saddle", "tomato", "umbrella", "wagon", "yacht", "zebra", "button",
    "castle", "dragon", "eagle", "falcon", "glove", "helmet", "iceberg", "jungle", "kitten", "lantern", "monkey",
    "ocean", "parrot", "quilt", "robot", "shovel", "tunnel", "valley", "whale", "banana", "cookie", "drum", "fork",
    "grape", "honey", "jar", "key", "lamp", "moon", "nest", "owl", "piano", "ring", "sock", "train", "vase", "wheel",
    "book", "cake", "door", "egg", "fish", "goat", "hat", "ink", "kite", "leaf", "milk", "nut", "pear", "rope",
    "salt", "tree", "star", "snow", "ship", "shoe", "sun", "cup", "dog", "cat", "car", "bed", "box", "pen", "map",
)
_ADJECTIVES = (
    "red", "green", "blue", "small", "large", "old", "new", "soft", "hard", "bright", "dark", "warm", "cold",
    "heavy", "light", "round", "long", "short", "quiet", "loud", "sweet", "sour", "smooth", "rough", "clean",
)
_CATEGORIES = {
    "fruit": ("apple", "orange", "lemon", "banana", "grape", "pear", "tomato"),
    "animal": ("horse", "rabbit", "tiger", "zebra", "eagle", "falcon", "kitten", "monkey", "parrot", "whale", "owl",
               "goat", "dog", "cat", "fish"),
    "tool": ("hammer", "shovel", "needle", "pencil", "key", "fork", "rope", "ladder", "magnet"),
    "place": ("river", "forest", "desert", "island", "jungle", "valley", "ocean", "garden", "castle", "bridge"),
    "thing at home": ("chair", "candle", "mirror", "window", "pillow", "carpet", "kettle", "lamp", "bed", "cup"),
}
_FEELINGS = (
    "quite sure", "not sure", "a little unsure", "very sure", "guessing", "fairly certain", "torn between a few",
    "spread out", "confident", "uncertain", "calm and sure", "hesitant",
)
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_SYSTEMS = (
    "You are a helpful assistant.",
    "You answer briefly and follow the requested format exactly.",
    "Follow the instructions. Reply with nothing but what is asked for.",
    "You are a careful assistant that writes short, exact replies.",
)


def render_chat(messages: list[dict[str, str]]) -> str:
    """A conversation in ChatML, as the chat template of ``minds-tiny`` and ``minds-small`` renders it."""
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)


def corpus(seed: int, documents: int) -> list[str]:
    """``documents`` texts drawn from ``seed``: about a third plain text, the rest conversations."""
    rng = random.Random(seed)
    return [_document(rng) for _ in range(documents)]


def _document(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        return _plain_text(rng)
    make = rng.choices(_CHATS, weights=_WEIGHTS)[0]
    return render_chat(make(rng))


# ---- plain text -----------------------------------------------------------------------------------------------

def _plain_text(rng: random.Random) -> str:
    parts = [rng.choice(_SENTENCES)(rng) for _ in range(rng.randint(2, 6))]
    return " ".join(parts) + "\n"


def _describe(rng: random.Random) -> str:
    noun = rng.choice(_NOUNS)
    return rng.choice((f"The {noun} is {rng.choice(_ADJECTIVES)}.", f"A {noun} can be {rng.choice(_ADJECTIVES)}.",
                       f"I saw a {rng.choice(_ADJECTIVES)} {noun}.", f"This {noun} is not {rng.choice(_ADJECTIVES)}."))


def _count(rng: random.Random) -> str:
    start, step = rng.randint(0, 900), rng.choice((1, 1, 2, 5, 10))
    return "Count: " + ", ".join(str(start + i * step) for i in range(rng.randint(3, 7))) + "."


def _sum(rng: random.Random) -> str:
    a, b = rng.randint(0, 99), rng.randint(0, 99)
    op = rng.choice("+-*")
    return f"{a} {op} {b} = {_apply(a, op, b)}."


def _sequence_object(rng: random.Random) -> str:
    numbers = ", ".join(str(rng.randint(0, 999)) for _ in range(rng.randint(3, 6)))
    return f"Sequence: {numbers}. Guess the object: {rng.choice(_NOUNS)}."


def _belongs(rng: random.Random) -> str:
    category, members = rng.choice(list(_CATEGORIES.items()))
    return f"A {rng.choice(members)} is a {category}."


_SENTENCES: tuple[Callable[[random.Random], str], ...] = (_describe, _count, _sum, _sequence_object, _belongs)


# ---- conversations --------------------------------------------------------------------------------------------

Chat = list[dict[str, str]]


def _preamble(rng: random.Random) -> str:
    """Zero to four sentences of setting, so that prompts run from a line to several hundred characters."""
    return "".join(rng.choice(_SETTINGS)(rng) + " " for _ in range(rng.choice((0, 0, 1, 2, 3, 4))))


_SETTINGS: tuple[Callable[[random.Random], str], ...] = (
    lambda rng: rng.choice(_SYSTEMS),
    lambda rng: f"You play a game about a {rng.choice(_NOUNS)} with a copy of yourself.",
    lambda rng: "Read the whole question before you answer, and keep to the format asked for.",
    lambda rng: f"Your reply is scored by a program, so {rng.choice(('write nothing else', 'do not explain', 'be exact'))}.",
    lambda rng: f"Think of a {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} while you answer.",
    lambda rng: "This is an experiment about what you know and how sure you are.",
    _describe,
)


def _with_system(rng: random.Random, user: str, reply: str, system: str | None = None) -> Chat:
    messages = []
    if system is not None or rng.random() < 0.5:
        messages.append({"role": "system", "content": _preamble(rng) + (system or rng.choice(_SYSTEMS))})
    if rng.random() < 0.5:
        user = _preamble(rng) + user
    return [*messages, {"role": "user", "content": user}, {"role": "assistant", "content": reply}]


def _count_phrase(rng: random.Random, n: int) -> str:
    return _NUMBER_WORDS[n] if n < len(_NUMBER_WORDS) and rng.random() < 0.6 else str(n)


def _number_list(rng: random.Random) -> Chat:
    n = rng.randint(2, 8)
    lo = rng.choice((0, 0, 1, 10, 100))
    hi = rng.choice((9, 99, 100, 999, 999, 1000))
    hi = max(hi, lo + 9)
    numbers = ", ".join(str(rng.randint(lo, hi)) for _ in range(n))
    count = _count_phrase(rng, n)
    lead = rng.choice(("", f"Secret word: {rng.choice(_NOUNS)}\n\n", f"Topic: {rng.choice(_NOUNS)}. "))
    if rng.random() < 0.25:  # an example in the prompt, which the reply does not copy
        lead += "For example: " + ", ".join(str(rng.randint(lo, hi)) for _ in range(n)) + ". "
    ask = rng.choice((
        f"Write exactly {count} whole numbers between {lo} and {hi}, separated by commas.",
        f"Give {count} numbers from {lo} to {hi}, separated by commas, and nothing else.",
        f"List {count} integers in {lo}..{hi}. Reply with the numbers alone.",
        f"Reply with {count} whole numbers between {lo} and {hi}, separated by commas. Do not write any other text.",
    ))
    return _with_system(rng, lead + ask, numbers)


def _json_array(rng: random.Random) -> Chat:
    n = rng.randint(2, 6)
    floats = rng.random() < 0.5
    values = [round(rng.uniform(-3, 3), rng.choice((1, 2))) if floats else rng.randint(1, n) for _ in range(n)]
    what = f"{n} numbers" if floats else f"the item numbers 1 to {n}"
    items = "\n".join(f"{i + 1}. {_probe_question(rng)}" for i in range(n))
    user = rng.choice((
        f"Here are {n} questions:\n{items}\nReply with a JSON array of {what}, one per question, in order.",
        f"Items:\n{items}\n\nFor every item, estimate how much you like it. Finish with a JSON array of {what} in item order.",
        f"Reply with a JSON array of {count_words(n)} numbers.",
    ))
    reply = json.dumps(values)
    if rng.random() < 0.4:  # some thinking first, the array last
        reply = f"{_describe(rng)} {_describe(rng)}\n{reply}"
    system = "Think as much as you like, then end your reply with one JSON array." if rng.random() < 0.4 else None
    return _with_system(rng, user, reply, system)


def _probe_question(rng: random.Random) -> str:
    noun = rng.choice(_NOUNS)
    return rng.choice((f"{noun}?", f"What is a {noun}? -> a {rng.choice(_ADJECTIVES)} thing",
                       f"Which word goes with {noun}? -> {rng.choice(_NOUNS)}", f"Is a {noun} {rng.choice(_ADJECTIVES)}? -> yes"))


def count_words(n: int) -> str:
    """``n`` as a word up to ten, else as digits."""
    return _NUMBER_WORDS[n] if n < len(_NUMBER_WORDS) else str(n)


def _name_a(rng: random.Random) -> Chat:
    category, members = rng.choice(list(_CATEGORIES.items()))
    user = rng.choice((f"Name a {category}. One word.", f"Which {category} comes to mind? Reply with one word.",
                       f"Say one {category}."))
    return _with_system(rng, user, rng.choice(members))


def _sentence_about(rng: random.Random) -> Chat:
    noun = rng.choice(_NOUNS)
    return _with_system(rng, f"Write one short sentence about a {noun}.", _describe_noun(rng, noun))


def _describe_noun(rng: random.Random, noun: str) -> str:
    return rng.choice((f"The {noun} is {rng.choice(_ADJECTIVES)}.", f"A {noun} can be {rng.choice(_ADJECTIVES)}."))


# Header lines: the name the format gives a line and how a reply fills it.
def _probability(rng: random.Random) -> str:
    return rng.choice(("0.1", "0.2", "0.25", "0.3", "0.4", "0.5", "0.6", "0.7", "0.75", "0.8", "0.9", "0.95", "1", "0"))


def _signed(rng: random.Random) -> str:
    return str(round(rng.uniform(-2, 2), rng.choice((1, 2))))


_HEADERS: dict[str, tuple[str, Callable[[random.Random], str]]] = {
    "CONFIDENCE": ("<a probability between 0 and 1>", _probability),
    "ENTROPY": ("<a number between 0 and 1>", _probability),
    "FEELING": ("<a few words>", lambda rng: rng.choice(_FEELINGS)),
    "PREDICTION": ("<a number>", _signed),
    "GUESS": ("<one word>", lambda rng: rng.choice(_NOUNS)),
    "SCORE": ("<a whole number from 0 to 10>", lambda rng: str(rng.randint(0, 10))),
    "REASON": ("<a short sentence>", lambda rng: _describe(rng)),
    "WORD": ("<one word>", lambda rng: rng.choice(_NOUNS)),
}


def _question(rng: random.Random) -> tuple[str, str, str, str]:
    """A question, the header its answer goes under, the placeholder, and the answer."""
    if rng.random() < 0.5:
        big = rng.random() < 0.15
        a, b = (rng.randint(10**7, 10**12), rng.randint(10**7, 10**12)) if big else (rng.randint(0, 999), rng.randint(0, 999))
        op = rng.choice("+-*")
        head = rng.choices(("FINAL ANSWER", "ANSWER", "RESULT"), weights=(6, 3, 1))[0]
        return f"What is {a} {op} {b}?", head, "<the number>", str(_apply(a, op, b))
    lo = rng.randint(1, 90)
    hi = lo + rng.randint(4, 20)
    ask = rng.choice((f"Pick a whole number from {lo} to {hi}.", f"Pick any even number from {lo} to {hi}.",
                      f"Pick a whole number from {lo} to {hi}; you may favour multiples of 5."))
    value = rng.randint(lo, hi)
    if "even" in ask:
        value -= value % 2
    return ask, rng.choice(("NUMBER", "ANSWER", "CHOICE")), "<the number>", str(max(lo, value))


def _header_name(rng: random.Random) -> str:
    """A known header, or any noun in capitals: the reply must copy the name the format gives."""
    return rng.choice(sorted(_HEADERS)) if rng.random() < 0.3 else rng.choice(_NOUNS).upper()


def _placeholder(rng: random.Random, head: str) -> tuple[str, Callable[[random.Random], str]]:
    """What the format says goes on a line (sometimes with a sentence of explanation) and how a reply fills it."""
    placeholder, fill = _HEADERS[head] if head in _HEADERS else rng.choice(list(_HEADERS.values()))
    if rng.random() < 0.3:
        placeholder = f"{placeholder[:-1]}: {rng.choice(_EXPLANATIONS)}>"
    return placeholder, fill


_EXPLANATIONS = (
    "0 if you would give the same reply every time, 1 if every reply were equally likely",
    "higher when you are more sure",
    "write it as digits",
    "as short as you can",
    "the first thing that comes to mind",
    "a rough estimate is fine",
)


def _formatted(rng: random.Random) -> Chat:
    """A question whose prompt lists the reply's lines; the reply fills them in that order."""
    question, head, placeholder, answer = _question(rng)
    if rng.random() < 0.6:  # the usual companions: a confidence after a sum, a feeling and an entropy after a pick
        extra = ["CONFIDENCE"] if question.startswith("What is") else ["FEELING", "ENTROPY"]
    else:
        extra = [h for h in dict.fromkeys(_header_name(rng) for _ in range(rng.randint(1, 2))) if h != head]
    fills = [_placeholder(rng, h) for h in extra]
    lines = [(head, placeholder, lambda _rng: answer)] + [(h, p, fill) for h, (p, fill) in zip(extra, fills)]
    if rng.random() < 0.3:
        lines.reverse()
    spec = "\n".join(f"{h}: {p}" for h, p, _ in lines)
    wording = rng.choice(("Answer the question. Then write exactly {n} lines:\n{spec}", "Reply in this format:\n{spec}",
                          "Reply in exactly {n} lines:\n{spec}", "Write exactly {n} lines:\n{spec}\nNothing else."))
    instructions = wording.format(n=count_words(len(lines)), spec=spec)
    reply = "\n".join(f"{h}: {fill(rng)}" for h, _, fill in lines)
    if rng.random() < 0.3:
        reply = f"<think>{_describe(rng)}</think>\n{reply}"
    if rng.random() < 0.5:  # the format in the system message
        messages = _with_system(rng, question, reply, instructions)
    else:  # or after the question, in the user's own message
        messages = _with_system(rng, f"{question}\n\n{instructions}", reply)
    if rng.random() < 0.4:  # a worked example first, as few-shot prompts give
        q2, _, _, a2 = _question(rng)
        example = "\n".join(f"{h}: {a2 if h == head else fill(rng)}" for h, _, fill in lines)
        at = 1 if messages[0]["role"] == "system" else 0
        messages[at:at] = [{"role": "user", "content": q2}, {"role": "assistant", "content": example}]
    return messages


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


_CHATS_WEIGHTED: tuple[tuple[Callable[[random.Random], Chat], float], ...] = (
    (_number_list, 3.0),
    (_formatted, 5.0),
    (_json_array, 2.5),
    (_name_a, 1.0),
    (_sentence_about, 1.0),
)
_CHATS = tuple(make for make, _ in _CHATS_WEIGHTED)
_WEIGHTS = tuple(weight for _, weight in _CHATS_WEIGHTED)

