"""The ``minds`` command (``command``) and what its subcommands print or write."""
