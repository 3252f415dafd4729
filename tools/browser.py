"""Open a report in headless Chromium: the console errors it raised, what it drew, a screenshot.

This is how the report is proven to render (the test) and how its picture is taken
(``benchmarks/report_screenshot.sh``). It drives Chromium over the DevTools protocol on a pipe
(``--remote-debugging-pipe``: JSON messages ended by a NUL byte, commands on the child's fd 3,
replies on its fd 4), so it needs no port, no network and no Python package beyond the standard
library; a plain ``--screenshot`` cannot report console errors nor size the shot to the page.

Usage: ``python3 tools/browser.py REPORT.html [--png OUT.png] [--width 1280]``; exit status 1
when the page raised a console error. A maintainer's script of this repository, not part of the
package (it imports the installed ``dlbench``).
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.launch import tempdirs

#: Names of the Chromium binary, in the order tried; ``DLBENCH_CHROMIUM`` overrides them.
BINARIES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")

# What the page is asked once it has loaded: how many of each thing it shows.
_PROBE = """JSON.stringify({
  svg: document.querySelectorAll('figure svg').length,
  figures: document.querySelectorAll('figure').length,
  tables: document.querySelectorAll('table').length,
  captions: Array.from(document.querySelectorAll('figcaption')).map(e => e.textContent),
  title: document.title,
  width: document.documentElement.scrollWidth,
  height: document.documentElement.scrollHeight,
  drawn: Array.from(document.querySelectorAll('figure svg')).filter(
           e => e.getBoundingClientRect().width > 0 && e.getBoundingClientRect().height > 0).length
})"""


class BrowserError(RuntimeError):
    """Chromium could not be started, or stopped answering."""


def find_chromium() -> str | None:
    """The Chromium binary to use: ``$DLBENCH_CHROMIUM``, else the first of :data:`BINARIES` on
    the PATH; None when there is none."""
    env = os.environ.get("DLBENCH_CHROMIUM")
    if env:
        return env if shutil.which(env) else None
    return next((p for p in map(shutil.which, BINARIES) if p), None)


@dataclass
class PageReport:
    """What a page did in the browser."""

    errors: list[str] = field(default_factory=list)   # console errors, exceptions, failed loads
    info: dict[str, Any] = field(default_factory=dict)  # the answers to _PROBE
    png: bytes | None = None


class _Pipe:
    """One Chromium process and the DevTools session of its page."""

    def __init__(self, binary: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="dlbench-chromium-", dir=tempdirs.root())
        cmd_r, self._cmd_w = os.pipe()   # we write commands, Chromium reads them on fd 3
        self._out_r, out_w = os.pipe()   # Chromium writes replies on fd 4, we read them
        args = [binary, "--headless", "--remote-debugging-pipe", "--disable-gpu",
                # root (a CI container) cannot use Chromium's sandbox; the page is a local file
                # written by dlbench, so nothing untrusted runs without it
                "--no-sandbox", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--hide-scrollbars",
                "--disable-dev-shm-usage", f"--user-data-dir={self.profile}", "about:blank"]

        def fds() -> None:
            # In the child, before exec: our pipe ends become its fd 3 and fd 4. Copied above
            # 10 first, since either end may itself be fd 3 or 4 and the first dup2 would
            # overwrite it.
            r, w = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)

        try:
            # pass_fds names the child's fds that survive close_fds, which runs after preexec_fn
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         preexec_fn=fds, pass_fds=(3, 4))
        except OSError as exc:
            raise BrowserError(f"cannot start {binary}: {exc}") from exc
        finally:
            os.close(cmd_r)
            os.close(out_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: bool = True) -> dict[str, Any]:
        """A command and its reply (events that arrive meanwhile are kept in ``events``)."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read()
            if m.get("id") == self._next_id:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error'].get('message')}")
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, method: str) -> dict[str, Any]:
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read()
            if m.get("method") == method:
                return m
            self.events.append(m)

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._out_r], [], [], max(0.0, left))
            if not ready:
                raise BrowserError(f"Chromium did not answer within {self.timeout_s:.0f} s")
            chunk = os.read(self._out_r, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium exited (status {self.proc.poll()})")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False)
        except (BrowserError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own child, by its handle
            self.proc.wait()
        for fd in (self._cmd_w, self._out_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in events:
        p = m.get("params") or {}
        if m.get("method") == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails") or {}
            out.append("exception: " + str((d.get("exception") or {}).get("description")
                                           or d.get("text")))
        elif m.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error",
                                                                                 "assert"):
            out.append("console.error: " + " ".join(str(a.get("value", a.get("description")))
                                                    for a in p.get("args") or []))
        elif m.get("method") == "Log.entryAdded" and (p.get("entry") or {}).get("level") == "error":
            e = p["entry"]
            out.append(f"{e.get('source')}: {e.get('text')} {e.get('url') or ''}".strip())
    return out


def open_page(path: str | Path, screenshot: bool = True, width: int = 1280,
              binary: str | None = None, timeout_s: float = 60.0) -> PageReport:
    """Load ``path`` in headless Chromium; its console errors, what it shows, and (with
    ``screenshot``) a PNG of the whole page at ``width`` CSS pixels."""
    binary = binary or find_chromium()
    if binary is None:
        raise BrowserError("no Chromium binary found (apt-get install chromium, or set "
                           "DLBENCH_CHROMIUM)")
    url = Path(path).resolve().as_uri()
    b = _Pipe(binary, timeout_s)
    try:
        targets = b.send("Target.getTargets", session=False)["targetInfos"]
        page = next((t for t in targets if t.get("type") == "page"), None)
        if page is None:
            page = {"targetId": b.send("Target.createTarget", {"url": "about:blank"},
                                       session=False)["targetId"]}
        b.session = b.send("Target.attachToTarget", {"targetId": page["targetId"],
                                                     "flatten": True}, session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            b.send(f"{domain}.enable")
        b.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900,
                                                      "deviceScaleFactor": 1, "mobile": False})
        b.send("Page.navigate", {"url": url})
        b.wait_for("Page.loadEventFired")
        got = b.send("Runtime.evaluate", {"expression": _PROBE, "returnByValue": True})
        info = json.loads(got["result"]["value"])
        png = None
        if screenshot:
            # the whole page in one shot: a viewport as tall as the document
            b.send("Emulation.setDeviceMetricsOverride", {
                "width": width, "height": int(info["height"]), "deviceScaleFactor": 1,
                "mobile": False})
            shot = b.send("Page.captureScreenshot", {"format": "png",
                                                     "captureBeyondViewport": True})
            png = base64.b64decode(shot["data"])
        return PageReport(errors=_errors(b.events), info=info, png=png)
    finally:
        b.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 tools/browser.py",
                                 description="Open an HTML report in headless Chromium: print "
                                             "what it shows and its console errors; optionally "
                                             "save a PNG of the whole page.")
    ap.add_argument("html")
    ap.add_argument("--png", help="write a screenshot of the whole page here")
    ap.add_argument("--width", type=int, default=1280, help="page width in CSS pixels")
    args = ap.parse_args(argv)
    rep = open_page(args.html, screenshot=bool(args.png), width=args.width)
    if args.png:
        Path(args.png).write_bytes(rep.png or b"")
    info = {k: v for k, v in rep.info.items() if k != "captions"}
    print(json.dumps({**info, "errors": rep.errors}, indent=1))
    return 1 if rep.errors else 0


if __name__ == "__main__":
    sys.exit(main())
