"""A plugin that imports fine but requires pluggy<1 (test fixture): `minds plugins` must not call it ok."""

from minds_core import hookimpl


@hookimpl
def minds_register_reward_functions(register):
    register("outdated.one", lambda completion: 1.0, "always 1")
