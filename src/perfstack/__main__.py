from perfstack.cli.entry import entry

entry()
