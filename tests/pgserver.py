"""A real PostgreSQL server for the tests and the store benchmark: Debian's ``postgresql``
package, ``initdb`` into a temporary folder, ``postgres`` listening on a loopback port.

``make test`` installs the package when it is missing (``make postgres``). PostgreSQL refuses
to run as root, and CI runs as root: the folder then belongs to the ``postgres`` user the
package creates, and the server runs as that user (``setpriv``). ``--pdeathsig`` ends the
server if the process that started it dies, so a killed test run leaves no server behind.

``fast=True`` (the tests) turns off ``fsync``: the tests check behaviour, not durability
after a power cut; the benchmark keeps PostgreSQL's defaults.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ports import free_port


def binaries() -> Path | None:
    """The folder of ``initdb`` and ``postgres`` (Debian keeps them out of PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    return Path(on_path).parent if on_path else None


def _as_owner(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--pdeathsig=TERM", *cmd]


@dataclass
class PgServer:
    """One running server; :meth:`new_database` gives each test its own database."""

    port: int
    folder: Path
    proc: subprocess.Popen[str]
    user: str = "ctxwright"
    made: list[str] = field(default_factory=list)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def psql(self, sql: str, database: str = "postgres") -> str:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            cur = conn.execute(sql)  # type: ignore[arg-type]
            return str(cur.fetchall()) if cur.description else ""

    def new_database(self) -> str:
        """A fresh empty database; its URL."""
        name = "t_" + uuid.uuid4().hex[:12]
        self.psql(f"CREATE DATABASE {name} TEMPLATE template0")
        self.made.append(name)
        return self.url(name)

    def stop(self) -> None:
        if self.proc.poll() is None:
            # SIGINT is PostgreSQL's "fast" shutdown: open sessions are ended (SIGTERM, "smart",
            # would wait for every client of the test run to disconnect)
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)


def start(*, fast: bool = True, timeout: float = 90.0) -> PgServer:
    """initdb + postgres on 127.0.0.1; raises RuntimeError with the server's words if it fails."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (make postgres installs Debian's package)")
    folder = Path(tempfile.mkdtemp(prefix="ctxwright-pg-"))
    data, sockets = folder / "data", folder / "run"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
        shutil.chown(sockets, "postgres", "postgres")
        os.chmod(folder, 0o700)
    init = subprocess.run(
        _as_owner(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", "ctxwright", "--auth=trust", "-E", "UTF8", "--locale=C"]
        ),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if init.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stderr or init.stdout}")
    port = free_port()
    settings = ["-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "shared_buffers=64MB"]
    if fast:
        settings += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
    proc = subprocess.Popen(
        _as_owner([str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sockets), *settings]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    server = PgServer(port, folder, proc)
    deadline = time.monotonic() + timeout
    while True:
        try:
            server.psql("SELECT 1")
            return server
        except Exception as exc:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                err = proc.communicate(timeout=30)[1]
                shutil.rmtree(folder, ignore_errors=True)
                raise RuntimeError(f"postgres did not start: {err or exc}") from None
            time.sleep(0.2)
