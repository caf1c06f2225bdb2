"""A throw-away PostgreSQL server for the tests: ``initdb`` and ``pg_ctl`` from the
system's packages (Debian's ``postgresql``; `.ci/run` installs it where it is missing) in
a temporary folder, on a free port of 127.0.0.1, stopped when the tests end."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise RuntimeError(
        "PostgreSQL's server programs (initdb, pg_ctl) are not installed: "
        "apt-get install postgresql (as .ci/run does)"
    )


def _version(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres_server(durable: bool = False) -> Iterator[str]:
    """A running server; its URL (user ``pomo``, no password, database ``postgres``). Not
    ``durable``, it writes nothing to disk it need not (for tests); ``durable``, it keeps
    its data as a server does, but commits without waiting for the disk (for benchmarks)."""
    bindir = _bindir()
    folder = Path(tempfile.mkdtemp(prefix="pomo-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root: run it as `postgres`
        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = folder / "data", _free_port()

    def run(*args: str) -> None:
        done = subprocess.run([*as_user, *args], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout}\n{done.stderr}"

    run(str(bindir / "initdb"), "-D", str(data), "-U", "pomo", "-A", "trust", "-E", "UTF8",
        "--no-sync", "--no-instructions")  # fmt: skip
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
    options += " -c synchronous_commit=off"
    if not durable:
        options += " -c fsync=off -c full_page_writes=off"
    log = folder / "server.log"
    run(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start")
    try:
        yield f"postgresql://pomo@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(folder, ignore_errors=True)


def new_database(server: str) -> str:
    """A fresh database on ``server``; its URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name}")
    return server.rsplit("/", 1)[0] + f"/{name}"
