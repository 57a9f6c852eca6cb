import sys

from scrun_cli.main import main

sys.exit(main())
