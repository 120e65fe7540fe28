"""``python -m controller.daemon``: run gflowd."""

import sys

from controller.daemon.main import main

sys.exit(main())
