"""Generate docs/compatibility.md from the schemas: ``python -m data_plane.protocol.compat``.

``--check`` exits non-zero if the file on disk differs (CI keeps it in sync).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_plane.protocol.messages import APIS

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"

HEADER = """# Kafka protocol compatibility

Generated from `data_plane/protocol/messages` by `python -m data_plane.protocol.compat`;
do not edit by hand. A client and the broker use the highest version both support
(negotiated with ApiVersions). "Flexible from" is the first version with compact encodings
and tagged fields.

| API | key | versions | flexible from |
| --- | --- | --- | --- |
"""


def render() -> str:
    rows = []
    for api in sorted(APIS.values(), key=lambda a: a.key):
        lo, _ = api.request.flexible
        flexible = f"v{lo}" if lo >= 0 and lo <= api.max_version else "—"
        rows.append(
            f"| {api.name} | {api.key} | {api.min_version}-{api.max_version} | {flexible} |"
        )
    return HEADER + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the doc is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = DOC.read_text() if DOC.exists() else ""
        if current != text:
            print(
                f"{DOC} is out of date: run python -m data_plane.protocol.compat", file=sys.stderr
            )
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
