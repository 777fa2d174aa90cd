"""minds: reinforcement learning of language models on the Tinker API.

Plugin authors import from here: ``hookimpl`` marks hook implementations, and
the environment protocol types come from ``minds_core.envs``.
"""

from importlib.metadata import PackageNotFoundError, version

import pluggy

hookimpl = pluggy.HookimplMarker("minds")

try:
    __version__ = version("minds-core")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = ["__version__", "hookimpl"]

# ---------------------------------------------------------------- environment arguments ([env.args])
from minds_core.envs.args import Rule, above, arg, at_least, env_args, non_empty_subset_of, one_of, within  # noqa: E402

__all__ += ["Rule", "above", "arg", "at_least", "env_args", "non_empty_subset_of", "one_of", "within"]
