"""The command line: argument parsing (`main`) and the commands themselves (`commands`)."""
