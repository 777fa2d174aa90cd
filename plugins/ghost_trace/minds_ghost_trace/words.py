"""The target words: common concrete nouns, one token-friendly word each, in a fixed order."""

from __future__ import annotations

_GROUPS = """
kitchen: spoon fork knife plate bowl cup mug kettle teapot oven stove fridge pan pot ladle whisk
  napkin tray jar bottle apron toaster blender sink sponge colander
food: apple banana orange lemon grape cherry peach pear plum melon mango onion garlic potato carrot
  tomato pepper cabbage lettuce bread cheese butter egg honey rice noodle soup cake cookie pie
  sandwich pizza walnut almond coconut pumpkin mushroom sausage pancake
animals: dog cat horse cow pig sheep goat chicken duck goose rabbit mouse rat squirrel fox wolf
  bear deer moose lion tiger zebra giraffe elephant monkey camel kangaroo koala panda otter
  beaver frog toad turtle snake lizard crocodile shark whale dolphin octopus crab lobster
  salmon trout eagle owl parrot pigeon penguin swan crow bee ant spider butterfly snail worm
home: chair table sofa bed pillow blanket lamp candle mirror clock curtain carpet rug door
  window shelf drawer closet ladder bucket broom mop basket vase frame stool cushion doormat
  bathtub shower towel soap toothbrush comb hairbrush wardrobe
clothes: shirt jacket coat sweater scarf glove mitten hat cap boot shoe sandal sock belt tie
  dress skirt trousers jeans pajamas umbrella wallet purse backpack necklace bracelet ring
  watch button zipper
tools: hammer saw drill screwdriver wrench pliers shovel rake hoe axe chisel nail screw bolt
  rope chain hook magnet needle thread scissors tape glue brush paint pencil pen eraser ruler
  stapler envelope notebook
vehicles: car truck bus bicycle motorcycle scooter train tram subway airplane helicopter rocket
  boat ship canoe kayak submarine tractor ambulance taxi wagon sled skateboard
nature: tree flower grass leaf branch root seed rose tulip daisy cactus fern moss mountain hill
  valley river lake ocean beach island desert forest cave volcano glacier rock pebble sand
  cloud rainbow snowflake icicle acorn pinecone feather shell
places: house castle tower bridge barn church school library hospital museum farm garden park
  fountain lighthouse tent igloo windmill stadium market bakery harbor airport
objects: ball kite balloon doll puzzle drum guitar piano violin trumpet flute bell whistle
  camera telescope microscope compass map globe book newspaper letter stamp coin key lock
  battery lantern flashlight radio telephone computer keyboard television robot trophy
  crown sword shield arrow anchor wheel barrel box crate flag ticket
"""


def _parse(groups: str) -> tuple[str, ...]:
    """The words in the order written, without the group labels."""
    return tuple(word for line in groups.strip().splitlines() for word in line.split(":", 1)[-1].split())


#: The bank, in a deterministic order; every word is unique and lower-case.
WORDS: tuple[str, ...] = _parse(_GROUPS)
