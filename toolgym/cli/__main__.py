"""``python -m toolgym.cli``."""

import sys

from toolgym.cli import main

sys.exit(main())
