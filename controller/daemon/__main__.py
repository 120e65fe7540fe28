"""``python -m controller.daemon``: run gflowd."""

import sys

from controller.daemon.loop import main

sys.exit(main())
