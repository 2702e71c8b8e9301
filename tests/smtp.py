"""A real SMTP server process on loopback for the tests (aiosmtpd, storing each message
in a Maildir), and reading what it received."""

from __future__ import annotations

import mailbox
import re
import socket
import subprocess
import sys
import time
from email.message import Message
from pathlib import Path

from tests.broker.conftest import free_port


class SmtpServer:
    def __init__(self, directory: Path) -> None:
        self.maildir = directory / "maildir"
        self.port = free_port()
        self.log = directory / "smtp.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> SmtpServer:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "aiosmtpd",
                    "-n",
                    "-l",
                    f"127.0.0.1:{self.port}",
                    "-c",
                    "aiosmtpd.handlers.Mailbox",
                    str(self.maildir),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(3) == b"220":
                        return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"the SMTP server did not start: {self.log.read_text()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    def messages(self) -> list[Message]:
        if not self.maildir.exists():
            return []
        box = mailbox.Maildir(self.maildir, create=False)
        return sorted((box[key] for key in box.keys()), key=lambda m: str(m.get("Date")))

    def wait_for(self, to: str, subject: str, timeout: float = 20.0) -> Message:
        """The newest message to ``to`` whose subject contains ``subject``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [
                m
                for m in self.messages()
                if to in str(m.get("To")) and subject in str(m.get("Subject"))
            ]
            if found:
                return found[-1]
            time.sleep(0.1)
        raise AssertionError(f"no mail to {to} about {subject!r}: {self.messages()}")


def body(message: Message) -> str:
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)
    return payload.decode()


def link_in(message: Message, base: str) -> str:
    """The one link to ``base`` in the message's body, as a path."""
    (path,) = re.findall(re.escape(base.rstrip("/")) + r"(/\S+)", body(message))
    return path
