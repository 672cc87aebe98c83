"""The ctxwright side of the process-group probes (``tests/test_mcp.py``).

``python tests/mcp_driver.py MARKER DB`` runs a ``Harness`` with the hostile MCP server
(``tests/mcp_servers/hostile.py --tag MARKER``), has the model call its ``family`` tool (the
server starts a child that ignores SIGTERM and keeps the server's stdout open), prints the
tool's answer (the pids and the process group) as one JSON line, then waits for a line on
stdin: ``exit`` leaves the harness normally, ``raise`` with an exception. The test may
instead end this process with SIGINT, SIGTERM or SIGKILL while it waits.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ctxwright import Harness, ScriptedBackend
from ctxwright.backends.scripted import call
from ctxwright.core.events import ToolEvent
from ctxwright.core.messages import Message

SERVER = Path(__file__).parent / "mcp_servers" / "hostile.py"


def main(marker: str, db: str) -> None:
    backend = ScriptedBackend(
        [Message(role="assistant", tool_calls=(call("hostile__family", {"marker": marker}, "c_family"),)), "ok"]
    )
    command = [sys.executable, str(SERVER), "--tag", marker]
    with Harness(
        "sys",
        [],
        backend=backend,
        db=db,
        mcp_servers=[command],
        status=False,
        todo=False,
        delegate=False,
        read_result=False,
        recall=False,
    ) as h:
        h.run("start the family")
        (ev,) = [e for e in h.session.events if isinstance(e, ToolEvent)]
        body = (ev.message.content or "").splitlines()[1]  # inside <external_content ...>
        print(json.dumps(json.loads(body)), flush=True)
        if sys.stdin.readline().strip() == "raise":
            raise RuntimeError("the driver fails inside the harness, on purpose")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
