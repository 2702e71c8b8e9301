"""The code blocks of README.md and docs/*.md, and a shell session that runs them in order.

A fenced block whose info string is ``sh``, ``bash``, ``console`` or ``python`` is an
example, and runs against ``manage.py up`` as written, except that the default ports
(``127.0.0.1:8000``, ``localhost:8000``, ``127.0.0.1:9092``) become the test's, and paths
under ``/tmp/`` move to the test's temporary directory. HTML
comments on the lines just before a block (blank lines may separate them) say how:

* ``<!-- not-run: reason -->``: skipped (deployment, a person at a terminal, placeholders);
* ``<!-- stop-after: N -->``: runs until stopped: interrupted (SIGINT) after N seconds,
  which counts as success (an earlier exit is judged by its status as usual);
* ``<!-- expect: text -->``: the block's output must contain ``text``;
* ``<!-- continues -->`` (Python): the block builds on the Python block before it; the
  two (or more) run as one program, in place of the last.

All blocks run in one bash session, files in the order of :func:`doc_files` (README,
docs/api.md, which makes the API key later pages use, docs/streams.md, which fills topic
``orders``, then the rest by name), so a
variable an example exports is there for the next one, as in a reader's terminal. Shell
blocks are sourced with ``set -euo pipefail``: the first failing command fails the block.
Python blocks run as programs (``python``: the project's virtualenv) with the session's
environment.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LANGUAGES = {"sh": "sh", "bash": "sh", "console": "sh", "python": "python"}
MARKERS = ("not-run", "stop-after", "expect", "continues")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*([a-z-]+)\s*(?::\s*(.*?))?\s*-->\s*$")
DEFAULT_TIMEOUT = 120


class DocFormatError(ValueError):
    """A marker the runner does not know, or a marker that makes no sense where it is."""


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str  # "sh" or "python"
    text: str
    markers: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def doc_files(root: Path = ROOT) -> list[Path]:
    docs = sorted((root / "docs").glob("*.md"))
    first = [root / "README.md", root / "docs" / "api.md", root / "docs" / "streams.md"]
    return first + [p for p in docs if p not in first]


def parse(path: Path) -> list[Block]:
    """Every example block of ``path`` (those marked not-run included), in order."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    markers: dict[str, str] = {}
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line)
        fence = FENCE.match(line)
        if marker and marker.group(1) in MARKERS:
            markers[marker.group(1)] = marker.group(2) or ""
        elif marker:  # one lower-case word: a marker misspelt, not prose
            raise DocFormatError(f"{path.name}:{i + 1}: unknown marker {marker.group(1)!r}")
        elif fence:
            indent, info = fence.groups()
            end = i + 1
            while end < len(lines) and not lines[end].strip().startswith("```"):
                end += 1
            body = [
                raw[len(indent) :] if raw.startswith(indent) else raw for raw in lines[i + 1 : end]
            ]
            language = LANGUAGES.get(info)
            if language is None:
                if markers:
                    raise DocFormatError(f"{path.name}:{i + 1}: markers before a {info!r} block")
            else:
                if info == "console":
                    body = [b[2:] for b in body if b.startswith("$ ")]
                blocks.append(Block(path, i + 1, language, "\n".join(body) + "\n", markers))
            markers = {}
            i = end
        elif line.strip():
            markers = {}
        i += 1
    for block in blocks:
        if "continues" in block.markers and block.language != "python":
            raise DocFormatError(f"{block.where}: only Python blocks continue")
        if "stop-after" in block.markers and not block.markers["stop-after"].isdigit():
            raise DocFormatError(f"{block.where}: stop-after takes whole seconds")
    return blocks


def programs(blocks: list[Block]) -> list[Block]:
    """The blocks to run: not-run ones dropped, continued Python blocks joined."""
    out: list[Block] = []
    last_python: Block | None = None
    for block in blocks:
        if "not-run" in block.markers:
            continue
        if "continues" in block.markers:
            if last_python is None or last_python.path != block.path or last_python not in out:
                raise DocFormatError(f"{block.where}: nothing to continue")
            out.remove(last_python)
            block = Block(
                block.path,
                block.line,
                "python",
                last_python.text + "\n" + block.text,
                {**last_python.markers, **block.markers},
            )
        out.append(block)
        if block.language == "python":
            last_python = block
    return out


def localize(text: str, web_port: int, broker_port: int, tmp: Path) -> str:
    """The example as it runs against the test's ``manage.py up``: its ports, and its own
    temporary directory for paths under /tmp."""
    for default in ("127.0.0.1:8000", "localhost:8000"):
        text = text.replace(default, f"127.0.0.1:{web_port}")
    text = text.replace("127.0.0.1:9092", f"127.0.0.1:{broker_port}")
    return re.sub(r"(?<![\w.])/tmp/", f"{tmp}/", text)


class BlockFailed(AssertionError):
    pass


class Session:
    """One bash process; each block is sourced (shell) or started (Python) from it."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.blocks_dir = workdir / ".doc-blocks"
        self.blocks_dir.mkdir(exist_ok=True)
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._send("set -euo pipefail\n")
        self.count = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text)
        self.process.stdin.flush()

    def run(self, block: Block, text: str) -> str:
        """Run one block; its output, or BlockFailed naming it with what it printed."""
        self.count += 1
        n = self.count
        stop_after = block.markers.get("stop-after")
        timeout = int(stop_after) + 30 if stop_after else DEFAULT_TIMEOUT
        if block.language == "python":
            script = self.blocks_dir / f"{n:03d}.py"
            script.write_text(text)
            if stop_after:
                command = f"timeout -k 10 -s INT {stop_after} python {script} || [ $? -eq 124 ]"
            else:
                command = f"timeout -k 10 {DEFAULT_TIMEOUT} python {script}"
        else:
            script = self.blocks_dir / f"{n:03d}.sh"
            script.write_text(text)
            if stop_after:
                command = f"timeout -k 10 -s INT {stop_after} bash {script} || [ $? -eq 124 ]"
            else:
                command = f"source {script}"
        done = f"@@doc-block {n} done"
        self._send(f"{command} </dev/null\necho '{done}'\n")
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.close()
                raise BlockFailed(
                    self._report(block, text, out, f"still running after {timeout} s")
                ) from None
            if line is None:
                code = self.process.wait()
                raise BlockFailed(self._report(block, text, out, f"failed (exit status {code})"))
            if done in line:  # after output that did not end its last line
                out.append(line[: line.index(done)])
                break
            out.append(line)
        output = "".join(out)
        expected = block.markers.get("expect")
        if expected and expected not in output:
            self.close()
            raise BlockFailed(self._report(block, text, out, f"did not print {expected!r}"))
        return output

    @staticmethod
    def _report(block: Block, text: str, out: list[str], what: str) -> str:
        tail = "".join(out)[-4000:]
        return f"the example at {block.where} {what}:\n{text}\n--- its output ---\n{tail}"

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
