"""The tinker-cookbook tests run the cookbook's own loops and shapes: without it (the README's install by hand leaves it
out) each of their files is skipped, saying how to install it."""

from minds_core.testing import skip_unless_installed

pytest_pycollect_makemodule = skip_unless_installed(
    "tinker_cookbook", "make setup installs it (the cookbook extra, then tinker-cookbook itself with --no-deps)"
)
