"""The names the SQL extension's rule (Java) shares with Python are declared once, in Python
(lookup_source.spark.sql_extension.contract), and the Java side reads them from the Contract.java
generated from there: the file in the tree is what Python generates, no Java source spells one
of them itself, and the rule's parts pass their unit tests (tests/java, a plain runner)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lookup_source.spark.join_checks import RuleFacts
from lookup_source.spark.sql_extension.contract import CONTRACT, GENERATED, java_source
from lookup_source.spark.sql_extension.jar import SOURCE
from lookup_source.spark.versions import SQL_JOINS
from tests.helpers import needs

ROOT = Path(__file__).resolve().parents[2]


def test_contract_java_is_what_python_generates() -> None:
    assert GENERATED.read_text(encoding="utf-8") == java_source(), (
        "Contract.java is stale: python -m lookup_source.spark.sql_extension.contract --write"
    )


def test_no_java_source_spells_a_shared_name_itself() -> None:
    values = {v for v in CONTRACT.values() if isinstance(v, str) and len(v) > 2}
    found = []
    for path in sorted(SOURCE.rglob("*.java")):
        if path == GENERATED:
            continue
        text = path.read_text(encoding="utf-8")
        code = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)  # not the comments
        for literal in re.findall(r'"((?:[^"\\]|\\.)*)"', code):
            if literal in values:
                found.append(f'{path.name}: "{literal}"')
    assert not found, f"use Contract's constants instead: {found}"


@needs(SQL_JOINS)
def test_the_factory_and_the_eval_type_are_pythons() -> None:
    from pyspark.util import PythonEvalType

    from lookup_source.spark import sql_functions

    assert CONTRACT["FACTORY_MODULE"] == sql_functions.__name__
    assert getattr(sql_functions, str(CONTRACT["FACTORY"])) is sql_functions.join_function
    assert CONTRACT["ARROW_UDTF"] == PythonEvalType.SQL_ARROW_UDTF


@needs(SQL_JOINS)
def test_the_rule_parts_pass_their_java_tests(tmp_path: Path) -> None:
    import pyspark

    from lookup_source.spark.sql_extension.jar import jar_path

    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.skip("no JDK on this machine")
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    classpath = f"{jars}/*:{jar_path(build=True)}"
    tests = sorted(str(p) for p in (ROOT / "tests" / "java").rglob("*Test.java"))
    compiled = subprocess.run(
        [javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", str(tmp_path), *tests],
        capture_output=True,
        text=True,
        check=False,
    )
    assert compiled.returncode == 0, compiled.stderr[-3000:]
    ran = subprocess.run(
        [java, "-cp", f"{tmp_path}:{classpath}", "asynclookup.sql.RulePartsTest"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert ran.returncode == 0 and " 0 failed" in ran.stdout, ran.stdout[-3000:]
    assert int(ran.stdout.split(" passed")[0].split()[-1]) >= 20
    # what the rule tells the table function, as the table function reads it
    told = [
        RuleFacts.parse(line.removeprefix("FACTS "))
        for line in ran.stdout.splitlines()
        if line.startswith("FACTS ")
    ]
    assert told == [
        RuleFacts(1234567, ("k", 'Odd "name"\\'), "r1"),
        RuleFacts(None, ("a", "b"), "r2"),
    ]
