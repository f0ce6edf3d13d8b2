"""The SQL extension's jar: found beside its Java source in the package, or built from it.

The jar is compiled with ``javac`` (Java 17) against the jars inside the installed pyspark
wheel — no Maven — and packed with its manifest saying what it was built from::

    python -m lookup_source sql-extension --build   # what `make` runs; or on first use

:func:`jar_path` returns the jar to use: the one in the package (``make`` builds it there, and a
wheel built from a clone carries it) when it was built from the Java source shipped beside it,
else one built before in the user's cache for this source and this Spark minor, else one built
now into that cache when a JDK is present. Without a JDK it raises :class:`MissingJarError`,
whose one line says what to run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from lookup_source.errors import ConfigurationError

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "java"
PACKAGED = HERE / "asynclookup-sql.jar"
EXTENSION_CLASS = "asynclookup.sql.AsyncLookupSqlExtensions"
"""What ``spark.sql.extensions`` names."""

_DIGEST = "Asynclookup-Source-Digest"
_SPARK = "Asynclookup-Built-Against-Spark"


class MissingJarError(ConfigurationError):
    """The extension's jar is not built and cannot be built here (no JDK)."""


def source_digest() -> str:
    """A digest of the Java source: a jar built from another source is rebuilt."""
    digest = hashlib.sha256()
    for path in sorted(SOURCE.rglob("*.java")):
        digest.update(path.relative_to(SOURCE).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def manifest(jar: Path) -> dict[str, str]:
    """The main attributes of ``jar``'s manifest (empty when it has none or is unreadable)."""
    try:
        with zipfile.ZipFile(jar) as archive:
            text = archive.read("META-INF/MANIFEST.MF").decode("utf-8")
    except (OSError, KeyError, zipfile.BadZipFile):
        return {}
    attributes = {}
    for line in text.replace("\r\n", "\n").replace("\n ", "").splitlines():
        name, _, value = line.partition(": ")
        if value:
            attributes[name] = value
    return attributes


def _current(jar: Path, digest: str) -> bool:
    return jar.is_file() and manifest(jar).get(_DIGEST) == digest


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "asynclookup"


def _cached(digest: str) -> Path:
    minor = ".".join(_spark_version().split(".")[:2])
    return cache_dir() / f"asynclookup-sql-{digest}-spark{minor}.jar"


def jar_path(build: bool = True) -> Path:
    """The extension's jar (see the module's doc); ``build=False``: never compile, raise
    :class:`MissingJarError` instead."""
    digest = source_digest()
    if _current(PACKAGED, digest):
        return PACKAGED
    cached = _cached(digest)
    if _current(cached, digest):
        return cached
    if not build:
        raise MissingJarError(_missing("the jar is not built"))
    return build_jar(PACKAGED if _in_a_clone() else cached)


def _in_a_clone() -> bool:
    """Whether the package is a clone's own folder (an editable install), whose jar ``make``
    builds in place, rather than an installed copy (whose folder is not ours to write)."""
    root = HERE.parents[2]
    return (root / "pyproject.toml").is_file() and (root / ".git").exists()


def _missing(why: str) -> str:
    return (
        f"the asynclookup SQL extension: {why}, and no JDK is here to build it: install a "
        "JDK 17 or newer (javac), then run: python -m lookup_source sql-extension --build"
    )


def _java_tool(name: str) -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).is_file():
        return str(Path(home) / "bin" / name)
    return shutil.which(name)


def build_target() -> Path:
    """Where a build goes: into the package of a clone (an editable install; a wheel built
    from the clone then carries the jar), else into the user's cache."""
    return PACKAGED if _in_a_clone() else _cached(source_digest())


def build_jar(target: Path = PACKAGED) -> Path:
    """Compile the Java source against the installed pyspark's jars into ``target``."""
    import pyspark

    javac = _java_tool("javac")
    if javac is None:
        raise MissingJarError(_missing("its jar is not built"))
    spark_jars = Path(pyspark.__file__).resolve().parent / "jars"
    if _in_a_clone():  # the names shared with Python, as Python declares them now
        from lookup_source.spark.sql_extension.contract import write

        write()
    sources = sorted(str(p) for p in SOURCE.rglob("*.java"))
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="asynclookup-sql-") as work:
        classes = Path(work) / "classes"
        classes.mkdir()
        command = [javac, "--release", "17", "-nowarn", "-cp", f"{spark_jars}/*"]
        _run([*command, "-d", str(classes), *sources], "javac")
        # packed beside the target, then renamed over it: a reader never sees half a jar
        staged = target.with_name(f".{target.name}.{os.getpid()}")
        try:
            _pack(classes, staged, source_digest())
            os.replace(staged, target)
        finally:
            staged.unlink(missing_ok=True)
    return target


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ConfigurationError(
            f"the asynclookup SQL extension did not build ({what} exited with "
            f"{done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}"
        )


def _pack(classes: Path, jar: Path, digest: str) -> None:
    """A jar of ``classes`` (a zip with a manifest), written in Python: no ``jar`` tool needed."""
    text = (
        "Manifest-Version: 1.0\r\n"
        "Implementation-Title: asynclookup SQL extension\r\n"
        f"{_DIGEST}: {digest}\r\n"
        f"{_SPARK}: {_spark_version()}\r\n\r\n"
    )
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("META-INF/MANIFEST.MF", text)
        for path in sorted(classes.rglob("*.class")):
            archive.write(path, path.relative_to(classes).as_posix())
