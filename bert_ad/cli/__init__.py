"""Command lines: shared flags, the runner that turns errors into one line, --help,
one module per launcher."""
