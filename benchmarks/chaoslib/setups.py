"""The two deployments the campaign runs, and the faults each one suffers.

`SqliteSetup`: one server over stdio on a SQLite store.  Faults: `kill` (SIGKILL of the
server; the client starts a new one, as an MCP client does) and `disk_full` (the store's
filesystem, a small tmpfs mounted for the run, filled to the last byte for a few seconds,
then emptied).  Without the right to mount (not root) there is no disk fault.

`ReplicaSetup`: two `serve --http` replicas on one throwaway PostgreSQL 15
(`tests/store/pg_cluster.py`), behind `transport.HttpTransport`.  Each replica runs on a
host of its own: a pid namespace (`unshare --pid --fork --mount-proc`, a small reaper as
its init), so the replicas do not share pids and judge each other's commands by lease, as
replicas on two machines do.  Faults: `kill` (SIGKILL of the replica process; its host
lives on, and its commands with it; the replica is started again on the same host),
`stop` (SIGSTOP, SIGCONT 1-4 s later: a replica cut off that comes back), `pg_restart`
(`pg_ctl restart -m immediate`) and `host_death` (the host's init killed: every process
of the host dies, its commands with it; a new host takes its place).  Without `unshare`
both replicas share the harness's host and there is no `host_death`.

Every replica is started with the campaign's bearer token in `AROMCP_HTTP_TOKEN` (ignored
by a server that does not check tokens), and the transport sends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaoslib.transport import Endpoint, HttpTransport, StdioTransport
from chaoslib.workload import REPO, make_project

sys.path.insert(0, str(REPO / "tests" / "store"))

PYTHON = sys.executable
LEASE_S = "8"  # the command lease in the campaign: longer than any stop, short enough for host deaths
REAPER = ("import os, signal, time\n"
          "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
          "while True:\n"
          "    try:\n        os.wait()\n"
          "    except ChildProcessError:\n        time.sleep(0.5)\n")


@dataclass
class FaultLog:
    """What was injected: (seconds since the start, kind, detail)."""

    started: float = field(default_factory=time.monotonic)
    events: list[tuple[float, str, str]] = field(default_factory=list)

    def add(self, kind: str, detail: str = "") -> None:
        now = datetime.now(UTC).isoformat(timespec="milliseconds")
        self.events.append((round(time.monotonic() - self.started, 3), kind, f"{detail} at {now}"))

    def count(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, kind, _ in self.events:
            counts[kind] = counts.get(kind, 0) + 1
        return counts


SERVER_TREE = [REPO]  # where the servers' package is imported from (`chaos.py --server-tree`)


def base_env(root: Path, commands: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AROMCP_")}
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), PYTHONPATH=str(SERVER_TREE[0]), PYTHONUNBUFFERED="1", XDG_DATA_HOME=str(home / "data"),
               AROMCP_COMMANDS_DIR=str(commands), AROMCP_SHELL_LEASE_S=LEASE_S, AROMCP_LOG_LEVEL="WARNING")
    return env


def commands_dir(name: str) -> Path:
    """A run-directory root on a tmpfs, private to this campaign."""
    base = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else Path("/tmp")
    path = base / f"aromcp-chaos-{name}-{os.getpid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


DISK_MB = 256  # the SQLite store's tmpfs

# -- one server over stdio on SQLite -----------------------------------------------------------
class SqliteSetup:
    def __init__(self, root: Path) -> None:
        self.kinds = {"kill": 3, "disk_full": 1}  # fault kinds and their weights
        self.root = root
        self.project = make_project(root / "project")
        self.fs = root / "store-fs"
        self.fs.mkdir(parents=True, exist_ok=True)
        # Big enough for a long round's store and its WAL (a 460-instance round's store is about
        # 28 MB): a store that outgrows its disk for good is not the fault this injects.
        self.mounted = _mount_tmpfs(self.fs, f"{DISK_MB}m")
        self.store = self.fs / "store.sqlite3"
        self.commands = commands_dir("sqlite")
        self.disk = f"a {DISK_MB} MB tmpfs, filled to the last byte" if self.mounted else "none (cannot mount a tmpfs)"
        if not self.mounted:
            self.kinds = {"kill": 1}
        argv = [PYTHON, "-m", "aromcp_workflows", "--project-dir", str(self.project), "serve", "--store",
                str(self.store)]
        env = base_env(root, self.commands) | {"CHAOS_HOST": "local"}
        self.transport = StdioTransport(argv, env, self.project, root / "server.stderr")
        self.dead_hosts: set[str] = set()  # one machine, never lost
        self.store_location = str(self.store)

    async def start(self) -> None:
        await self.transport.call("workflow_list", {"include_global": False})

    async def inject(self, kind: str, rng: random.Random, faults: FaultLog) -> None:
        if kind == "kill":
            pid = self.transport.kill()
            faults.add("kill", f"server pid {pid}")
        elif kind == "disk_full":
            filler = self.fs / "filler"
            _fill(filler)
            faults.add("disk_full", f"{self.fs} full")
            await asyncio.sleep(rng.uniform(0.5, 2.5))
            filler.unlink(missing_ok=True)

    async def close(self) -> None:
        await self.transport.close()
        if self.mounted:
            usage = shutil.disk_usage(self.fs)
            if usage.used > usage.total // 2:
                print(f"    harness: the store fills {usage.used >> 20} of the {DISK_MB} MB of its tmpfs; "
                      "raise DISK_MB in benchmarks/chaoslib/setups.py", file=sys.stderr)

    def cleanup(self) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.fs)], capture_output=True, check=False)
        shutil.rmtree(self.commands, ignore_errors=True)


def _mount_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                          capture_output=True, check=False)
    return done.returncode == 0


def _fill(path: Path) -> None:
    """Write until the filesystem refuses: it is full."""
    chunk = b"\0" * (1 << 20)
    with contextlib.suppress(OSError), path.open("wb") as handle:
        while True:
            handle.write(chunk)
            handle.flush()
    with contextlib.suppress(OSError), path.open("ab") as handle:  # the last partial megabyte
        while True:
            handle.write(b"\0" * 4096)
            handle.flush()


# -- two HTTP replicas on PostgreSQL -----------------------------------------------------------
@dataclass
class Host:
    """A pid namespace standing for a machine (or the harness's own, without unshare)."""

    name: str
    proc: subprocess.Popen[bytes] | None = None  # unshare; its child is the namespace's init
    init: int | None = None  # the init's pid, as the harness sees it
    generation: int = 0  # one more for each namespace made under this name (a host that died is gone)

    @property
    def label(self) -> str:
        """What commands on this host write as `$CHAOS_HOST`: the name and generation."""
        return f"{self.name}.{self.generation}"


@dataclass
class Replica:
    endpoint: Endpoint
    port: int
    host: Host
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None  # the server's pid, as the harness sees it
    stopped: bool = False


class ReplicaSetup:
    def __init__(self, root: Path, token: str | None, rng: random.Random) -> None:
        self.kinds = {"kill": 3, "stop": 2, "pg_restart": 2, "host_death": 1}  # fault kinds and their weights
        from pg_cluster import PgCluster, find_bin_dir  # type: ignore[import-not-found]

        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL found (pg_ctl on PATH or /usr/lib/postgresql/*/bin)")
        self.root, self.token = root, token
        self.project = make_project(root / "project")
        self.cluster = PgCluster(bin_dir).start()
        self.store_location = self.cluster.create_database()
        self.commands = commands_dir("replicas")
        self.env = base_env(root, self.commands) | ({"AROMCP_HTTP_TOKEN": token} if token else {})
        self.hosts_apart = os.geteuid() == 0 and all(shutil.which(tool) for tool in ("unshare", "nsenter"))
        if not self.hosts_apart:
            self.kinds = {"kill": 3, "stop": 2, "pg_restart": 2}
        self.replicas = [Replica(Endpoint(f"replica{n}"), port, Host(f"host{n}"))
                         for n, port in enumerate(_free_ports(2))]
        self.transport = HttpTransport([r.endpoint for r in self.replicas], rng, token)
        self.hosts_made = 0
        self.dead_hosts: set[str] = set()  # labels of host generations that died

    async def start(self) -> None:
        from aromcp_workflows.store import open_store

        open_store(self.store_location).migrate()  # once, before two replicas race to do it
        for replica in self.replicas:
            self._new_host(replica.host)
            await self._start_replica(replica)

    def _new_host(self, host: Host) -> None:
        self.hosts_made += 1
        host.generation += 1
        if not self.hosts_apart:
            return
        host.proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", PYTHON, "-c",
                                      REAPER], stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while host.init is None:
            children = Path(f"/proc/{host.proc.pid}/task/{host.proc.pid}/children").read_text().split()
            host.init = int(children[0]) if children else None
            if host.init is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("unshare made no namespace")
                time.sleep(0.01)

    async def _start_replica(self, replica: Replica) -> None:
        serve = [PYTHON, "-m", "aromcp_workflows", "--project-dir", str(self.project), "serve", "--http", "--port",
                 str(replica.port), "--store", self.store_location]
        argv = serve if replica.host.init is None else ["nsenter", "-t", str(replica.host.init), "-p", "-m", *serve]
        log = (self.root / f"{replica.endpoint.name}.log").open("ab")
        env = self.env | {"CHAOS_HOST": replica.host.label}
        replica.proc = subprocess.Popen(argv, env=env, cwd=self.project, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 60
        while not _listening(replica.port):
            if replica.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{replica.endpoint.name} did not start: see {self.root}")
            await asyncio.sleep(0.05)
        replica.pid = replica.proc.pid if replica.host.init is None else _only_child(replica.proc.pid)
        replica.stopped = False
        self.transport.set_up(replica.endpoint, f"http://127.0.0.1:{replica.port}/mcp")

    async def inject(self, kind: str, rng: random.Random, faults: FaultLog) -> None:
        replica = rng.choice(self.replicas)
        if kind == "pg_restart":
            faults.add("pg_restart")
            await asyncio.to_thread(self.cluster.restart_immediate)
        elif kind == "stop" and replica.pid is not None:
            os.kill(replica.pid, signal.SIGSTOP)
            replica.stopped = True
            faults.add("stop", replica.endpoint.name)
            await asyncio.sleep(rng.uniform(1.0, 4.0))
            os.kill(replica.pid, signal.SIGCONT)
            if replica.proc is not None and replica.proc.pid != replica.pid:
                # nsenter stops itself when its child stops (util-linux continue_as_child) and
                # would never reap it: continue it too
                os.kill(replica.proc.pid, signal.SIGCONT)
            replica.stopped = False
        elif kind == "kill" and replica.pid is not None:
            replica.endpoint.up = False  # the balancer's health check notices
            os.kill(replica.pid, signal.SIGKILL)
            faults.add("kill", replica.endpoint.name)
            await self._wait_gone(replica)
            await asyncio.sleep(rng.uniform(0.2, 1.5))
            await self._start_replica(replica)
        elif kind == "host_death" and replica.host.init is not None:
            replica.endpoint.up = False
            os.kill(replica.host.init, signal.SIGKILL)  # the kernel kills every process of the namespace
            self.dead_hosts.add(replica.host.label)
            faults.add("host_death", replica.host.label)
            await self._wait_gone(replica)
            assert replica.host.proc is not None
            replica.host.proc.wait()
            replica.host.init = None
            await asyncio.sleep(rng.uniform(0.2, 1.5))
            self._new_host(replica.host)
            await self._start_replica(replica)

    @staticmethod
    async def _wait_gone(replica: Replica) -> None:
        assert replica.proc is not None
        while replica.proc.poll() is None:
            await asyncio.sleep(0.02)
        replica.pid = None

    async def close(self) -> None:
        await self.transport.close()
        for replica in self.replicas:
            for pid in (replica.pid, replica.proc.pid if replica.proc is not None else None):
                if pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
            if replica.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(replica.pid, signal.SIGTERM)
            if replica.proc is not None:
                try:
                    replica.proc.wait(15)
                except subprocess.TimeoutExpired:
                    replica.proc.kill()
            host = replica.host
            if host.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(host.proc.pid, signal.SIGKILL)
                host.proc.wait()

    def cleanup(self) -> None:
        self.cluster.stop()
        shutil.rmtree(self.commands, ignore_errors=True)


def _free_ports(count: int) -> list[int]:
    """`count` distinct free ports: each socket is held until all are bound (one bound and
    closed before the next can be given the same port again, and two replicas then shared
    one: the second could not listen, and its health check saw the first)."""
    with contextlib.ExitStack() as held:
        socks = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _only_child(pid: int) -> int:
    """nsenter's child: the replica itself, in its namespace (seen from here)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if children:
                return int(children[0])
        time.sleep(0.01)
    raise RuntimeError(f"nsenter {pid} started no replica")


def describe(setup: Any) -> str:
    return type(setup).__name__
