"""Every shell and Python example in README.md and docs/*.md runs, as written, against
``manage.py up`` (what ``make run`` starts): see tests/docs/examples.py for the markers
a page uses to skip, bound or check a block."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from bench.soak import Stack
from tests.docs.examples import (
    ROOT,
    BlockFailed,
    DocFormatError,
    Session,
    doc_files,
    localize,
    parse,
    programs,
)

# Left out of the reader's checkout the examples run in: runtime state and build output.
NOT_LINKED = {".git", "data", "staticfiles", ".venv", ".doc-blocks"}


def test_every_page_parses_and_its_markers_make_sense():
    blocks = [b for path in doc_files() for b in parse(path)]
    assert blocks, "no examples found"
    runnable = [b for path in doc_files() for b in programs(parse(path))]
    assert runnable, "every example is marked not-run"
    for block in blocks:
        if "not-run" in block.markers:
            assert block.markers["not-run"], f"{block.where}: say why it is not run"


def checkout(workdir: Path) -> None:
    """A reader's checkout: the repository's files, and this interpreter's virtualenv as
    ``.venv`` (what ``make install`` creates)."""
    workdir.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in NOT_LINKED:
            (workdir / entry.name).symlink_to(entry)
    (workdir / ".venv").symlink_to(Path(sys.prefix))


@pytest.mark.slow
def test_examples_run_against_manage_py_up(tmp_path):
    stack = Stack(tmp_path / "up", services=False)
    session = None
    failure = None
    try:
        stack.start()
        found = re.search(r"Password: (\S+)", stack.log())
        assert found, stack.log()[-3000:]
        workdir = tmp_path / "checkout"
        checkout(workdir)
        env = {
            **stack.env,
            # As after `make run`: the admin password it printed, and the virtualenv first.
            "ADMIN_PASSWORD": found.group(1),
            "PATH": f"{sys.prefix}/bin:{stack.env.get('PATH', '/usr/bin:/bin')}",
            "PYTHONPATH": str(ROOT),
            # Spark binds its driver to the machine's address otherwise.
            "SPARK_LOCAL_IP": "127.0.0.1",
            "HOME": str(tmp_path / "home"),
        }
        (tmp_path / "home").mkdir()
        session = Session(workdir, env)
        ran = 0
        for path in doc_files():
            for block in programs(parse(path)):
                started = time.monotonic()
                output = session.run(
                    block, localize(block.text, stack.port, stack.broker_port, tmp_path)
                )
                # Shown with the test's output when it fails, or with -s.
                print(f"--- {block.where} ({time.monotonic() - started:.1f} s)\n{output[-1500:]}")
                ran += 1
        assert ran
    except BlockFailed as failed:
        failure = f"{failed}\n--- manage.py up ---\n{stack.log()[-2000:]}"
    finally:
        if session is not None:
            session.close()
        stack.stop()
    if failure:
        pytest.fail(failure, pytrace=False)


def test_markers_skip_bound_check_and_join_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n"
        "<!-- not-run: needs a cluster -->\n```sh\nkubectl get pods\n```\n\n"
        "```python\nx = 1\n```\n\n"
        "<!-- continues -->\n<!-- expect: 2 -->\n```python\nprint(x + 1)\n```\n\n"
        "  <!-- stop-after: 5 -->\n\n  ```sh\n  tail -f /tmp/log\n  ```\n\n"
        "```console\n$ echo hi\nhi\n```\n\n"
        "<!-- a plain comment -->\n```json\n{}\n```\n"
    )
    blocks = parse(page)
    assert [(b.language, b.markers) for b in blocks] == [
        ("sh", {"not-run": "needs a cluster"}),
        ("python", {}),
        ("python", {"continues": "", "expect": "2"}),
        ("sh", {"stop-after": "5"}),
        ("sh", {}),
    ]
    run = programs(blocks)
    assert [b.text for b in run] == ["x = 1\n\nprint(x + 1)\n", "tail -f /tmp/log\n", "echo hi\n"]
    assert run[0].markers == {"continues": "", "expect": "2"}
    assert localize(run[1].text, 1, 2, Path("/t")) == "tail -f /t/log\n"
    assert localize("curl localhost:8000/ -b 127.0.0.1:9092", 81, 92, tmp_path) == (
        "curl 127.0.0.1:81/ -b 127.0.0.1:92"
    )


@pytest.mark.parametrize(
    "text",
    [
        "<!-- not-runn: typo -->\n```sh\ntrue\n```\n",
        "<!-- continues -->\n```sh\ntrue\n```\n",
        "<!-- stop-after: soon -->\n```sh\ntrue\n```\n",
        "<!-- continue -->\n```python\npass\n```\n",
    ],
)
def test_a_marker_that_makes_no_sense_is_an_error(tmp_path, text):
    page = tmp_path / "page.md"
    page.write_text(text)
    with pytest.raises(DocFormatError):
        programs(parse(page))
