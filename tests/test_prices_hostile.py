"""``--prices FILE`` given something that is not a small TOML file: a FIFO (a read would block
forever), /dev/zero (a read never ends), a directory, a symlink loop, a 1 GB sparse file,
tables nested too deep, prices of inf/nan/1e308, bytes that are not UTF-8, 10^5 models. Each
is one line and exit 2, in bounded time and memory."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from ctxwright.cache.prices_file import read_prices_file
from ctxwright.cli.main import main
from ctxwright.errors import PricesFileError


def _log(tmp_path: Path) -> Path:
    usage = {"prompt_tokens": 2000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 1024}}
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"request": body, "response": {"model": "m", "usage": usage}}) + "\n")
    return path


def _fifo(tmp_path: Path) -> Path:
    p = tmp_path / "prices.fifo"
    os.mkfifo(p)
    return p


def _loop(tmp_path: Path) -> Path:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def _sparse(tmp_path: Path) -> Path:
    p = tmp_path / "sparse.toml"
    with p.open("wb") as f:
        f.truncate(1 << 30)
    return p


def _text(name: str, text: str | bytes):  # type: ignore[no-untyped-def]
    def make(tmp_path: Path) -> Path:
        p = tmp_path / name
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
        return p

    return make


CASES = {
    "fifo": (_fifo, "not a regular file"),
    "dev-zero": (lambda tmp_path: Path("/dev/zero"), "not a regular file"),
    "directory": (lambda tmp_path: tmp_path, "not a regular file"),
    "symlink-loop": (_loop, "cannot read"),
    "sparse-1GB": (_sparse, "too large"),
    "deep-inline": (_text("deep.toml", "x = " + "{a = " * 100_000 + "1" + "}" * 100_000), "prices file"),
    "deep-arrays": (_text("arr.toml", "x = " + "[" * 200_000 + "]" * 200_000), "prices file"),
    "inf": (_text("inf.toml", '[models."m"]\ninput = inf\n'), "a price must be"),
    "nan": (_text("nan.toml", '[models."m"]\ninput = nan\n'), "a price must be"),
    "1e308": (_text("big.toml", '[models."m"]\ninput = 1e308\n'), "a price must be"),
    "not-utf8": (_text("bin.toml", b'[models."m"]\ninput = 1 # \xff\xfe\n'), "not UTF-8"),
}


@pytest.mark.parametrize("case", CASES)
def test_hostile_prices_file_is_one_line(tmp_path: Path, case: str) -> None:
    make, says = CASES[case]
    path = make(tmp_path)
    with pytest.raises(PricesFileError, match=says) as info:
        read_prices_file(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("case", ["fifo", "dev-zero", "symlink-loop", "sparse-1GB", "deep-inline"])
def test_audit_refuses_a_hostile_prices_file_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    path = CASES[case][0](tmp_path)
    result: list[int] = []
    # a FIFO used to block the read forever: run it on a thread with a deadline
    t = threading.Thread(target=lambda: result.append(main(["audit", str(_log(tmp_path)), "--prices", str(path)])))
    t.daemon = True
    t.start()
    t.join(timeout=20)
    if t.is_alive() and case == "fifo":  # free the blocked reader so the test run can end
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    assert result == [2], f"audit did not refuse {case} within 20 s"
    cap = capsys.readouterr()
    lines = [line for line in cap.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in cap.err + cap.out


def test_a_hundred_thousand_models_is_refused_or_read_quickly(tmp_path: Path) -> None:
    p = tmp_path / "many.toml"
    p.write_text("".join(f'[models."m{i}"]\ninput=1\n' for i in range(100_000)))
    started = time.monotonic()
    with pytest.raises(PricesFileError, match="too large"):
        read_prices_file(p)
    small = tmp_path / "some.toml"
    small.write_text("".join(f'[models."m{i}"]\ninput=1\n' for i in range(30_000)))
    assert len(read_prices_file(small).rows) == 30_000
    assert time.monotonic() - started < 10
