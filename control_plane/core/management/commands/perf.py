"""``manage.py perf produce|consume``: throughput and latency against any Kafka endpoint."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from bench import perf


class Command(BaseCommand):
    help = "Kafka producer/consumer performance test (prints one JSON line)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("mode", choices=["produce", "consume"])
        parser.add_argument("--bootstrap", default="127.0.0.1:9092")
        parser.add_argument("--topic", required=True)
        parser.add_argument("--records", type=int, default=1_000_000)
        parser.add_argument("--record-size", type=int, default=100)
        parser.add_argument("--acks", default="1", choices=["0", "1", "all"])
        parser.add_argument("--linger-ms", type=int, default=5)
        parser.add_argument("--batch-bytes", type=int, default=2**20)
        parser.add_argument("--compression", default="none")
        parser.add_argument("--partitions", type=int, default=1)
        parser.add_argument(
            "--client", default="confluent", choices=["confluent", "kafka-python", "aiokafka"]
        )
        parser.add_argument("--username", help="API key id (SASL); omit for no auth")
        parser.add_argument("--password", help="API key secret (or PERF_PASSWORD env)")
        parser.add_argument("--mechanism", default="SCRAM-SHA-256")
        parser.add_argument("--timeout", type=float, default=300)

    def handle(self, *args: Any, **o: Any) -> None:
        import os

        endpoint = perf.Endpoint(
            o["bootstrap"],
            o["username"],
            o["password"] or os.environ.get("PERF_PASSWORD"),
            o["mechanism"],
        )
        if o["mode"] == "produce":
            result = perf.produce(
                endpoint,
                o["topic"],
                records=o["records"],
                size=o["record_size"],
                acks=o["acks"],
                linger_ms=o["linger_ms"],
                batch_bytes=o["batch_bytes"],
                compression=o["compression"],
                client=o["client"],
                timeout=o["timeout"],
            )
        else:
            result = perf.consume(
                endpoint,
                o["topic"],
                records=o["records"],
                partitions=o["partitions"],
                client=o["client"],
                timeout=o["timeout"],
            )
        perf.emit(result)
