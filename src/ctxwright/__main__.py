"""``python -m ctxwright``: the same command as ``ctxwright`` (for a venv not on PATH)."""

from __future__ import annotations

import sys

from ctxwright.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
