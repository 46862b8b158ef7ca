"""The ``hfexport`` subcommands, one module per role; ``hfexport/cli.py`` holds the group and registers them."""
