"""The command line: the only code that prints and exits."""
