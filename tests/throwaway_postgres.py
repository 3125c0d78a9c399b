"""A throw-away PostgreSQL cluster for tests and benchmarks: ``initdb`` and ``pg_ctl`` in a
temporary folder, on a free local port, owned by a non-root user (PostgreSQL refuses to run as
root; as root we run it as the ``postgres`` user that Debian's package creates).

The superuser ``admin`` logs in over TCP with a password (scram-sha-256), so tests can check what
happens with a wrong one.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

ADMIN = "admin"
ADMIN_PASSWORD = "s3cret-Admin-pw"


class ServerUnavailable(RuntimeError):
    """PostgreSQL is not installed here, or the cluster would not start."""


def find_bindir() -> Path:
    for candidate in (os.environ.get("SOLGATE_PG_BINDIR"), shutil.which("pg_ctl") and str(Path(shutil.which("pg_ctl")).parent)):
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[-3]))
    if not found:
        raise ServerUnavailable("PostgreSQL is not installed (no initdb); apt-get install postgresql")
    return Path(found[-1]).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self) -> None:
        self.bindir = find_bindir()
        self.base = Path(tempfile.mkdtemp(prefix="solgate-pg-"))
        self.data = self.base / "data"
        self.port = free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            os.chmod(self.base, 0o755)
            shutil.chown(self.base, "postgres", "postgres")

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        command = list(args)
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, cwd=self.base)
        if result.returncode != 0:
            raise ServerUnavailable(f"{' '.join(args[:2])} failed: {(result.stderr or result.stdout).strip()[-800:]}")
        return result

    def start(self) -> "Cluster":
        pwfile = self.base / "pw"
        pwfile.write_text(ADMIN_PASSWORD + "\n")
        if self.as_root:
            shutil.chown(pwfile, "postgres", "postgres")
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", ADMIN, f"--pwfile={pwfile}",
                  "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync")
        pwfile.unlink()
        self.restart()
        return self

    def restart(self) -> None:
        options = (f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c max_connections=200 -c shared_buffers=128MB")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.base / "log"), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        except ServerUnavailable:
            pass
        shutil.rmtree(self.base, ignore_errors=True)

    def url(self, database: str = "postgres", user: str = ADMIN, password: str | None = ADMIN_PASSWORD) -> str:
        auth = f"{user}:{password}" if password is not None else user
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def sql(self, statement: str, database: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            conn.execute(statement)

    def new_database(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        self.sql(f'CREATE DATABASE "{name}"')
        return name
