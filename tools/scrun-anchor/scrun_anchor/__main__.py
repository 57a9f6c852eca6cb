import sys

from scrun_anchor.main import main

sys.exit(main())
