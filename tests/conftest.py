from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# `make test` runs the suite on two workers (pytest-xdist). llama.cpp's threads spin while they
# wait, so two models of two threads each on a 2-core machine slow each other down many times over;
# one thread per model keeps the workers from fighting (core/threads.py). Subprocesses inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("CTXWRIGHT_THREADS", "1")

# A suite started as a background job of a shell without job control (`make test &`, nohup, some
# CI runners) inherits SIGINT ignored, and an ignored signal stays ignored across fork and exec:
# every `ctxwright` the tests start would then shrug off the Ctrl-C the tests send it (Python
# installs its KeyboardInterrupt handler only where SIGINT is not ignored). The tests are about
# a terminal's Ctrl-C, so they run as from a terminal: a handler here is reset to the default
# in every child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from proxy_upstream import Upstream


@pytest.fixture
def store(tmp_path):
    from ctxwright.store.sessions import Store

    s = Store(tmp_path / "ctx.db")
    yield s
    s.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[object]:
    """A real PostgreSQL server for the whole run (``tests/pgserver.py``). Missing PostgreSQL
    skips the PostgreSQL tests on a developer's machine and fails them in CI, where
    ``make test`` installs it."""
    import os

    import pgserver

    try:
        server = pgserver.start()
    except RuntimeError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is needed in CI: {exc}")
        pytest.skip(str(exc))
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server) -> str:
    """The URL of a fresh, empty database on the test server."""
    return str(pg_server.new_database())


@pytest.fixture(params=["sqlite", "postgresql"])
def db_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new store on each database: an SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "ctx.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def any_store(db_target: str):
    """:class:`Store` on each database in turn (tests that must hold on both)."""
    from ctxwright.store.sessions import Store

    s = Store(db_target)
    yield s
    s.close()


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test talks to servers on 127.0.0.1 only: httpx (under the openai and anthropic SDKs)
    honours the proxy variables and ``OPENAI_BASE_URL`` of the environment, which would send that
    loopback traffic elsewhere or nowhere."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture(scope="session")
def _embedding_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("embeddings") / "vectors.sqlite"


@pytest.fixture(autouse=True)
def _own_embedding_cache(monkeypatch: pytest.MonkeyPatch, _embedding_cache: Path) -> None:
    """The embedding rankers cache tool vectors in the user's cache folder by default; the
    suite keeps its own (shared by its tests: vectors are keyed by text, so sharing is safe)."""
    monkeypatch.setenv("CTXWRIGHT_EMBEDDINGS", str(_embedding_cache))


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    """The loopback provider of ``tests/proxy_upstream.py``, one per test module."""
    up = Upstream().serve()
    yield up
    up.stop()
