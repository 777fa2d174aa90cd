"""A sibling module the environments import through the repository root (``environments.letter_bank``)."""

#: (letter, a word that starts with it)
LETTERS = [("b", "boat"), ("k", "kite"), ("m", "moon"), ("s", "sun"), ("t", "tree"), ("p", "pear")]
