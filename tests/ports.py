"""Loopback ports for the servers the tests start as subprocesses: one free port, and the wait
until a child listens on it (a loaded machine starts Python slowly, so every wait is a poll with
a deadline, never a fixed sleep)."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the server started next binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, proc: subprocess.Popen[str], timeout: float = 60.0, what: str = "the server") -> None:
    """Until ``proc`` accepts connections on ``port``; fail the test with its stderr if it exits
    or does not listen within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                _out, err = proc.communicate(timeout=30)
                pytest.fail(f"{what} did not start: {err}")
            time.sleep(0.1)
