"""A folder without __init__.py: not a package, so not a loose environment."""
