from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def store(tmp_path):
    from ctxwright.store.sessions import Store

    s = Store(tmp_path / "ctx.db")
    yield s
    s.close()
