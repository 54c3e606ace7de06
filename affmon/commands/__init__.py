"""What each ``affmon`` subcommand does; ``affmon.cli`` only parses and dispatches."""
