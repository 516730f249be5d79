"""One module per CLI subcommand, each with `run(args) -> int`; imported only when used."""
