"""The command answers on any install: --version and --help without extras, and a subcommand
whose extra is missing names it in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lookup_source import __version__

# Runs the command as if no extra were installed: importing any of these modules fails.
WITHOUT_EXTRAS = """
import sys
BLOCKED = {"aiohttp", "redis", "asyncpg", "hiredis", "matplotlib",
           "asynclookup_redis", "asynclookup_http", "asynclookup_postgres"}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Block())
from lookup_source.cli import main
sys.exit(main(sys.argv[1:]))
"""


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS, *argv], capture_output=True, text=True, timeout=120
    )


def test_version_without_extras() -> None:
    done = run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"asynclookup {__version__}"


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"], ["bench", "--help"]])
def test_help_without_extras(argv: list[str]) -> None:
    done = run(*argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: asynclookup")
    assert "Traceback" not in done.stderr


def test_every_bench_flag_shows_its_default() -> None:
    done = run("bench", "--help")
    flags = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  --")]
    assert "--scenarios" in flags and len(flags) > 10
    text = " ".join(done.stdout.split("options:", 1)[1].split())
    for flag in flags:
        if flag not in ("--no-plot",):
            after = text.split(f"{flag} ", 1)[1]
            assert "(default:" in after.split(" --", 1)[0], f"{flag} shows no default"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["demo"],
            "asynclookup demo needs aiohttp, asynclookup_http: pip install 'asynclookup[http]'",
        ),
        (["serve"], "asynclookup serve needs aiohttp: pip install 'asynclookup[http]'"),
        (["bench", "--scenarios", "postgres", "--no-plot"], "pip install 'asynclookup[bench]'"),
    ],
)
def test_a_missing_extra_is_named_in_one_line(argv: list[str], message: str) -> None:
    done = run(*argv)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
