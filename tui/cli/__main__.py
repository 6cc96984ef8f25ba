"""`python -m tui.cli ARGS`: the `gpu` command without the console script (as `python -m tui.cli`
ran when the command line was one module)."""

import sys

from tui.cli.run import main

sys.exit(main())
