"""The command answers on any install: --version and --help without extras, and a subcommand
whose extra is missing names it in one line."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from lookup_source import __version__
from lookup_source.cli import build_parser

# Runs the command as if no extra were installed: importing any of these modules fails.
WITHOUT_EXTRAS = """
import sys
from lookup_source.registry import FIRST_PARTY, first_party_module
BLOCKED = {"aiohttp", "redis", "asyncpg", "hiredis", "matplotlib",
           *(first_party_module(name) for name in FIRST_PARTY)}
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


@pytest.mark.parametrize(
    "argv", [["--help"], ["demo", "--help"], ["bench", "--help"], ["serve", "--help"]]
)
def test_help_without_extras(argv: list[str]) -> None:
    done = run(*argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: asynclookup")
    assert "Traceback" not in done.stderr


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(commands.choices)


@pytest.mark.parametrize("command", ["demo", "bench", "serve"])
def test_every_flag_says_what_it_does_and_its_default(command: str) -> None:
    parser = _subcommands()[command]
    flags = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert len(flags) >= 4
    for action in flags:
        flag = action.option_strings[0]
        assert action.help and not action.help.startswith("("), f"{command} {flag}: no help"
        if action.default not in (None, False):
            assert "(default: %(default)s)" in action.help, f"{command} {flag} hides its default"
    assert "(default:" in parser.format_help()


def test_bench_help_names_what_it_writes_to_the_stores() -> None:
    from lookup_source.bench import stores

    text = " ".join(_subcommands()["bench"].format_help().split())
    assert stores.PREFIX in text and stores.TABLE in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["demo"],
            "asynclookup demo needs aiohttp, asynclookup_http: pip install ./connectors/http "
            "from a clone of asynclookup (once it is published: pip install 'asynclookup[http]')",
        ),
        (["serve"], "asynclookup serve needs aiohttp: pip install ./connectors/http from a clone"),
        (["bench", "--scenarios", "postgres", "--no-plot"], "pip install 'asynclookup[bench]')"),
    ],
)
def test_a_missing_extra_is_named_in_one_line(argv: list[str], message: str) -> None:
    done = run(*argv)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
