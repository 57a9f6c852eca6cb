from scrun_cli.main import entry

entry()
