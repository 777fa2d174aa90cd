"""load_environment returns an environment of another framework, not a classic verifiers one."""


class GymLike:
    """Has the attributes vf.load_environment sets, but is no vf.Environment."""

    env_id = ""
    env_args: dict = {}

    def reset(self) -> str:
        return "observation"


def load_environment() -> GymLike:
    return GymLike()
