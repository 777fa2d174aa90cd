"""A module that forgot load_environment."""


def make_environment() -> None:
    return None
