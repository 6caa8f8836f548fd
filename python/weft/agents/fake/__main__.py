"""``python -m weft.agents.fake --flavor claude|codex|gemini <the real CLI's argv>``."""

import sys

from weft.agents.fake.cli import main

sys.exit(main())
