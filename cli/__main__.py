"""``python -m cli`` is the ``linkwatch`` command."""

import sys

from cli.main import main

sys.exit(main())
