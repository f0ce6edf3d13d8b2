"""The images of docker/ build: without a Docker engine, each Dockerfile's steps are replayed in
a scratch directory (COPY from the build context, RUN in a fresh Python environment standing
for the base image), then the image's command is started and its health check must pass."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
import venv
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers import clean_environment, needs_index

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"


@dataclass
class Image:
    """What a Dockerfile says, in order."""

    steps: list[tuple[str, str]] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    health: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)


def parse(dockerfile: Path) -> Image:
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    image = Image()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "CMD":
            image.command = json.loads(rest)
        elif instruction == "HEALTHCHECK":
            image.health = json.loads(rest[rest.index("CMD") + 3 :].strip())
        elif instruction == "EXPOSE":
            image.ports += [int(p.split("/")[0]) for p in rest.split()]
        else:
            image.steps.append((instruction, rest.strip()))
    return image


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def replay(image: Image, context: Path, scratch: Path) -> tuple[Path, dict[str, str]]:
    """Run the steps; return the working directory the command starts in, and its environment
    (the base image's Python first on the PATH)."""
    base = scratch / "python"
    venv.create(base, with_pip=True)
    env = clean_environment()
    env["PATH"] = os.pathsep.join([str(base / "bin"), env.get("PATH", "")])
    root = scratch / "root"
    workdir = root
    workdir.mkdir(parents=True)
    for instruction, argument in image.steps:
        if instruction == "FROM":
            assert argument.startswith("python:3."), f"a Python base image, got {argument}"
        elif instruction == "WORKDIR":
            workdir = root / argument.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif instruction == "COPY":
            *sources, target = shlex.split(argument)
            destination = workdir / target
            for source in sources:
                origin = context / source
                assert origin.exists(), f"COPY {source}: not in the build context"
                if origin.is_dir():
                    into = destination if len(sources) == 1 else destination / origin.name
                    shutil.copytree(
                        origin,
                        into,
                        dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
                    )
                else:
                    destination.mkdir(parents=True, exist_ok=True)
                    shutil.copy(origin, destination / origin.name)
        elif instruction == "RUN":
            done = subprocess.run(
                argument,
                shell=True,
                cwd=workdir,
                env=env,
                capture_output=True,
                text=True,
                timeout=1200,
            )
            assert done.returncode == 0, f"RUN {argument}:\n{done.stderr[-3000:]}"
        else:
            raise AssertionError(f"the replay does not know {instruction} {argument}")
    return workdir, env


def _on(argv: list[str], port: int, free: int) -> list[str]:
    """``argv`` with the image's port replaced by a free one of this machine."""
    return [a.replace(str(port), str(free)) for a in argv]


DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))


@needs_index  # its RUN steps install from the package index, as the image build does
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[d.name for d in DOCKERFILES])
def test_the_image_builds_and_its_command_reports_healthy(dockerfile: Path, tmp_path: Path) -> None:
    image = parse(dockerfile)
    assert image.command and image.health and image.ports, "CMD, HEALTHCHECK and EXPOSE"
    workdir, env = replay(image, ROOT, tmp_path)
    port, free = image.ports[0], _free_port()
    process = subprocess.Popen(
        _on(image.command, port, free),
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            check = subprocess.run(
                _on(image.health, port, free),
                cwd=workdir,
                env=env,
                capture_output=True,
                timeout=30,
            )
            if check.returncode == 0:
                break
            assert process.poll() is None, process.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, check.stderr.decode()[-2000:]
            time.sleep(0.5)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_compose_builds_from_the_repository_and_checks_every_service() -> None:
    text = COMPOSE.read_text()
    services = re.findall(r"^  (\w+):$", text, re.MULTILINE)
    assert services == ["redis", "postgres", "users"]
    assert text.count("healthcheck:") == len(services)
    for dockerfile in re.findall(r"dockerfile: (\S+)", text):
        assert (ROOT / dockerfile).exists(), dockerfile  # the context is the repository
    assert "context: .." in text
    assert (DOCKER / "postgres-init.sql").exists()
