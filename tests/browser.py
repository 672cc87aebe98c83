"""A small driver for a real headless Chromium over the DevTools protocol (CDP).

Why CDP and not ``--dump-dom``: only the protocol reports every console message, uncaught
exception, Content-Security-Policy violation and network request as it happens, and lets
us wait until the page says its charts are drawn instead of guessing a delay. The client is
``websockets``' synchronous one; Chromium is the distribution's ``chromium`` package.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

CHROMIUM = os.environ.get("CTXWRIGHT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
)


def chromium_available() -> bool:
    return Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)


@dataclass
class PageResult:
    """What loading a page showed: console errors, exceptions, requests that left the file."""

    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    evaluated: dict[str, Any] = field(default_factory=dict)
    screenshot: Path | None = None
    load_ms: float = 0.0


class _Cdp:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result") or {})
            self.events.append(reply)

    def pump(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                self.events.append(json.loads(self.ws.recv(timeout=left)))
            except TimeoutError:
                return


def open_page(
    path: Path,
    *,
    expressions: dict[str, str],
    ready: str,
    screenshot: Path | None = None,
    width: int = 1280,
    height: int = 900,
    timeout: float = 90.0,
    max_shot_height: int = 16000,
) -> PageResult:
    """Load ``path`` in headless Chromium, wait until the JS expression ``ready`` is true,
    evaluate ``expressions`` and optionally write a full-page PNG to ``screenshot``."""
    # Chromium's helper processes may still write to the profile for a moment after the main
    # process is killed; a profile that cannot be removed must not fail the test.
    with tempfile.TemporaryDirectory(prefix="ctxw-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: the renderer and GPU helpers die with it
        )
        try:
            return _drive(proc, path, expressions, ready, screenshot, width, height, timeout, max_shot_height)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            if proc.stderr:
                proc.stderr.close()


def _drive(
    proc: subprocess.Popen[str],
    path: Path,
    expressions: dict[str, str],
    ready: str,
    screenshot: Path | None,
    width: int,
    height: int,
    timeout: float,
    max_shot_height: int,
) -> PageResult:
    assert proc.stderr is not None
    url = None
    deadline = time.monotonic() + 60
    seen = []
    while url is None and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(r"DevTools listening on (ws://\S+)", line)
        if m:
            url = m.group(1)
    if url is None:
        raise RuntimeError("chromium did not start its DevTools endpoint: " + "".join(seen[-20:]))
    out = PageResult()
    with connect(url, max_size=None, open_timeout=30) as ws:
        cdp = _Cdp(ws)
        target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page", "Network"):
            cdp.send(f"{domain}.enable", session=sid)
        cdp.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=sid,
        )
        start = time.monotonic()
        cdp.send("Page.navigate", {"url": path.resolve().as_uri()}, session=sid)
        end = start + timeout
        ok = False
        while time.monotonic() < end:
            cdp.pump(0.2)
            got = cdp.send("Runtime.evaluate", {"expression": f"Boolean({ready})", "returnByValue": True}, session=sid)
            if got.get("result", {}).get("value") is True:
                ok = True
                break
        out.load_ms = (time.monotonic() - start) * 1000
        cdp.pump(0.5)  # late console messages
        for name, expr in expressions.items():
            got = cdp.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=sid)
            out.evaluated[name] = got.get("result", {}).get("value")
        if screenshot is not None:
            h = cdp.send(
                "Runtime.evaluate",
                {"expression": "document.documentElement.scrollHeight", "returnByValue": True},
                session=sid,
            )["result"]["value"]
            shot = cdp.send(
                "Page.captureScreenshot",
                {
                    "format": "png",
                    "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": width, "height": min(int(h), max_shot_height), "scale": 1},
                },
                session=sid,
            )
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            out.screenshot = screenshot
        for ev in cdp.events:
            method, p = ev.get("method"), ev.get("params") or {}
            if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                out.errors.append(f"console.{p['type']}: {text}")
            elif method == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails") or {}
                out.errors.append(f"exception: {d.get('text')} {(d.get('exception') or {}).get('description', '')}")
            elif method == "Log.entryAdded" and (p.get("entry") or {}).get("level") in ("error", "warning"):
                out.errors.append(f"log: {p['entry'].get('text')}")
            elif method == "Network.requestWillBeSent":
                req_url = (p.get("request") or {}).get("url", "")
                if not req_url.startswith(("file:", "data:", "blob:", "about:")):
                    out.requests.append(req_url)
        if not ok:
            out.errors.append(f"page not ready after {timeout:.0f} s: {ready}")
        with contextlib.suppress(Exception):
            cdp.send("Browser.close")
    return out
