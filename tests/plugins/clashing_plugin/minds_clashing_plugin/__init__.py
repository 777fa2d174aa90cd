"""A plugin whose environment name clashes with the example plugin's (test fixture)."""

from minds_core import hookimpl


@hookimpl
def minds_register_environments(register):
    register("echo_example", lambda: None, description="clashes with minds-example-plugin")
