"""``manage.py perf produce|consume``: throughput and latency against any Kafka endpoint.

A thin wrapper: the load generator is :mod:`bench.perf` (also ``python -m bench.perf``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from bench import perf


class Command(BaseCommand):
    help = "Kafka producer/consumer performance test (prints one JSON line)."

    def add_arguments(self, parser: CommandParser) -> None:
        perf.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        perf.emit(perf.run(options))
