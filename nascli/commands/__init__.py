"""One module per subcommand; each parses options and calls the engine."""
