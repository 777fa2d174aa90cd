"""A plugin that breaks the registration contract twice and keeps it once (test fixture)."""

from minds_core import Rubric, SingleTurnEnvironment, Task, hookimpl


def load_fine(**args):
    """One task; the registry must keep this environment although its plugin is broken."""
    return SingleTurnEnvironment({"train": [Task(prompt="Say yes.", answer="yes")]}, Rubric())


@hookimpl
def minds_register_environments(register):
    register("Bad Name!", 42, description="a bad name and an object that is no loader")
    register("not_a_loader", "load_fine", description="a string where a loader belongs")
    register("fine_env", load_fine, description="kept: the contract holds")
