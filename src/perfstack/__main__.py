from perfstack.cli.main import entry

entry()
