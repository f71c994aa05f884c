"""Where toolgym keeps what it builds once and reuses (the tiny offline model, the SQL world's databases)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "TOOLGYM_CACHE"


def cache_root() -> Path:
    """``$TOOLGYM_CACHE``, else ``~/.cache/toolgym`` (not created here)."""
    explicit = os.environ.get(CACHE_ENV)
    return Path(explicit) if explicit else Path.home() / ".cache" / "toolgym"
