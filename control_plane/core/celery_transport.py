"""The embedded Celery transport: kombu's filesystem queue, with atomic publishes.

``make run`` has no Redis, so Celery's queue is a folder under the data dir shared by
beat (which publishes the periodic ticks) and the worker (which consumes them). Kombu's
filesystem transport creates a message file under its final name and then writes it,
and its reader takes no lock: a worker that lists the folder between the two reads an
empty or partial file, fails to decode it, and dies ("Unrecoverable error:
JSONDecodeError"). The same holds for the exchange tables it rewrites in place. On a
busy two-core machine that happened within minutes.

This transport keeps the folder layout and file names (so a queue left by an earlier
version is still read) and changes how files appear:

* a message is written under a hidden temporary name that no reader matches, then
  renamed to its final name; a rename within one directory is atomic on POSIX, so a
  reader sees a whole message or none;
* an exchange table is rewritten the same way, under a lock file that serialises
  writers (readers need no lock: they open either the old file or the new one);
* a message that still cannot be decoded (a disk error, a file put there by hand) is
  moved to ``corrupt/`` beside the queue and logged, instead of ending the worker.

Why not another transport: kombu's SQLAlchemy transport keeps every consumed message as
a row (``visible=False``) forever, and each poll would take SQLite's write lock; ticks
that skip the queue in single-machine mode would make ``up`` run different code from a
production worker and beat. This keeps the processes and the code path of production.

Crash behaviour: a publisher that dies mid-write leaves only a hidden temporary file,
which no reader takes; the message is lost, as an unsent one would be. Delivery is at
most once (the reader moves the file away before decoding), as with kombu's original.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any

from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

logger = logging.getLogger("millrace.celery.transport")

TEMP_PREFIX = "."  # kombu's readers match "<stamp>_<uuid>.<queue>.msg"; ".x" never does


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees part of it."""
    temporary = path.with_name(f"{TEMP_PREFIX}{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


class Channel(filesystem.Channel):
    """Kombu's filesystem channel with atomic message and exchange-table writes."""

    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        path = Path(self.data_folder_out) / name
        try:
            write_atomically(path, str_to_bytes(dumps(payload)))
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot add file {str(path)!r} to directory") from exc

    def _get(self, queue: str) -> Any:
        queue_find = f"{queue}.msg"
        for filename in sorted(os.listdir(self.data_folder_in)):
            if filename.partition(".")[2] != queue_find:
                continue
            source = os.path.join(self.data_folder_in, filename)
            processed = self.processed_folder if self.store_processed else tempfile.gettempdir()
            try:
                shutil.move(source, processed)
            except OSError:
                continue  # another reader took it first
            taken = os.path.join(processed, filename)
            try:
                with open(taken, "rb") as handle:
                    payload = handle.read()
            except OSError as exc:
                raise filesystem.ChannelError(f"Cannot read file {taken!r} from queue.") from exc
            try:
                message = loads(bytes_to_str(payload))
            except ValueError:
                self._quarantine(taken, filename)
                continue
            if not self.store_processed:
                with contextlib.suppress(OSError):
                    os.remove(taken)
            return message
        raise Empty()

    def _quarantine(self, taken: str, filename: str) -> None:
        corrupt = Path(self.data_folder_in).parent / "corrupt"
        corrupt.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            shutil.move(taken, corrupt / filename)
        logger.error("skipped an undecodable Celery message %s (moved to %s)", filename, corrupt)

    # -- exchange tables -------------------------------------------------------------------

    def get_table(self, exchange: str) -> list[Any]:
        file = self._exchange_file(exchange)
        try:
            text = file.read_text()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot open {file}") from exc
        return [filesystem.exchange_queue_t(*q) for q in loads(text)]

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")

        def bind(queues: list[Any]) -> list[Any]:
            return queues if binding in queues else [binding, *queues]

        self._rewrite_table(exchange, bind)

    def _delete(
        self, queue: str, exchange: str, routing_key: str, pattern: str, *a: Any, **kw: Any
    ) -> None:
        # Skip kombu's filesystem override (an in-place rewrite); its base forgets the queue.
        super(filesystem.Channel, self)._delete(queue, exchange, routing_key, pattern, *a, **kw)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        self._rewrite_table(exchange, lambda queues: [q for q in queues if q != binding])

    def _rewrite_table(self, exchange: str, change: Callable[[list[Any]], list[Any]]) -> None:
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        try:
            with self._table_lock(file):
                queues = self.get_table(exchange)
                changed = change(queues)
                if changed != queues or not file.exists():
                    write_atomically(file, str_to_bytes(dumps(changed)))
        except OSError as exc:
            raise filesystem.ChannelError(f"Cannot open {file}") from exc

    @staticmethod
    @contextlib.contextmanager
    def _table_lock(file: Path) -> Iterator[None]:
        with open(file.with_name(f"{TEMP_PREFIX}{file.name}.lock"), "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


class Transport(filesystem.Transport):
    Channel = Channel
