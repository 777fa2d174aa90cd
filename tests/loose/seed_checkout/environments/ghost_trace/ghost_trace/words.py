"""Concrete nouns to encode: short, common, lower-case, each once."""

WORDS = """
apple anchor badge barrel basket beetle blanket bottle bridge bucket
button cabin candle carpet castle chair cherry clock cloud coin
comb cookie crown cup desk drum eagle feather fence flute
fork frog garden glove hammer helmet honey island jacket kettle
kite ladder lamp leaf lemon lizard magnet mirror mitten needle
onion orange owl paddle peach pencil pillow pipe pocket pumpkin
rabbit ribbon river rocket saddle scarf shell shovel spoon stamp
tent ticket tiger towel tractor trumpet tulip violin wagon window
""".split()
