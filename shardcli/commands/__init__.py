"""One module per subcommand: flags -> frozen spec -> core -> render -> exit code."""
