#!/usr/bin/env python3
"""Build and run a real personal HTCondor pool on this machine, for mwpy's tests and CI.

Why this exists: the host is Debian 12 (bookworm), which has no HTCondor
package, and installing newer Debian packages on the host would replace its
libc.  So the pool lives in a Debian trixie root (debootstrap, minbase) with
the ``minicondor`` package, started with ``chroot``.  Host folders are
bind-mounted at the *same path* inside the root, because the HTCondor
bindings check a job's ``initialdir`` on the host while the job uses it inside
the root.  Jobs run as the ordinary user ``mwpy``; the host talks to the pool
over 127.0.0.1 with an IDTOKEN for that user.

Subcommands: ``up``, ``down``, ``restart``, ``exec``, ``status``, ``purge``
(see ``--help``; docs/condor-pool.md tells the whole story).  Everything is
idempotent, every failure is one line on stderr and a non-zero exit status.
The script needs root and Python 3.11's standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import grp
import hashlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

# --------------------------------------------------------------------------
# Fixed facts of the pool.  Changing one of the build facts (SUITE, PACKAGES)
# makes the next `up` rebuild or complete the cached root.
# --------------------------------------------------------------------------

DEFAULT_BASE = Path("/var/cache/mwpy-condor")
BASE_ENV = "MWPY_CONDOR_BASE"
#: The Debian suite of a new root: trixie (stable: minicondor 23.9) by default; `up --suite sid` builds one with
#: HTCondor 25 (the bindings' version) in its own BASE. A built root keeps its suite (written in its marker).
SUITE = "trixie"
SUITES = ("trixie", "sid")
PACKAGES = ("minicondor", "python3", "python3-venv", "procps", "ca-certificates")
USER = "mwpy"
DOMAIN = "mwpy.pool"
DEFAULT_PORT = 9618
DEFAULT_CPUS = 8
#: MB each execute node of a two-node pool advertises (MEMORY), shared by its slots (a job's dynamic slot is
#: carved from it): node 2 has four times node 1's, so the two nodes differ in a resource as well as in their
#: custom attribute (MwpyNode). Node 1's is 512 MB (a slave job's default request) for each of its cpus.
NODE1_MEMORY = 4096
NODE2_MEMORY = 16384
FIRST_UID = 2000
VENV = "/opt/mwpy/venv"
JOB_PYTHON = "/opt/mwpy/bin/python"
PROJECT_COPY = "/opt/mwpy/src"
PROJECT_STAMP = "/opt/mwpy/project.sha256"
CONDOR_CONFIG_FILE = "/etc/condor/config.d/99-mwpy-pool.conf"
ROOT_CLIENT_CONFIG = "/etc/mwpy/client_config"
ROOT_TOKEN_DIR = "/etc/mwpy/tokens.d"
ROOT_CA_BUNDLE = "/etc/mwpy/host-ca-certificates.crt"
POOL_KEY = "/etc/condor/passwords.d/POOL"
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
BUILD_MARKER = ".mwpy-root-complete"
DEFAULT_TIMEOUT = 120.0
STOP_GRACE = 15.0
KILL_GRACE = 10.0
JOB_LEASE = 20

# The optional second execute node (`up --nodes 2`): its own network namespace, joined to the
# host by a veth pair in a private /24 that this tool creates and removes.  Only these two
# addresses are ever used; with two nodes every daemon of the submit node listens on HOST_ADDR
# (never on all interfaces) and the second node's on NODE2_ADDR.
NODE_NET = "10.251.7"
HOST_ADDR = f"{NODE_NET}.1"
NODE2_ADDR = f"{NODE_NET}.2"
NODE_PREFIX = 24
NETNS = "mwpy-node2"
VETH_HOST = "mwpy-veth0"
VETH_NODE = "mwpy-veth1"
NODE2_HOSTNAME = f"node2.{DOMAIN}"
#: Where the second node's daemons keep their state (LOCAL_DIR inside the root): separate from
#: the first node's, because both run from the same root.
NODE2_LOCAL_DIR = "/var/lib/mwpy-node2"

# Host kernel settings that condor_master's kernel tuning would rewrite
# (/proc/sys is shared with the root).  We set ENABLE_KERNEL_TUNING = False,
# mount the root's /proc/sys read-only, and still check these did not move.
WATCHED_SYSCTLS = (
    "kernel/pid_max",
    "kernel/threads-max",
    "net/ipv4/ip_local_port_range",
    "net/core/somaxconn",
    "net/core/rmem_max",
    "net/core/wmem_max",
    "net/ipv4/tcp_max_syn_backlog",
    "fs/pipe-user-pages-soft",
    "fs/file-max",
    "vm/dirty_bytes",
    "vm/dirty_background_bytes",
    "vm/dirty_ratio",
    "vm/dirty_background_ratio",
)

# Folders a --share may not shadow: they are the root's own system.
RESERVED_PREFIXES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt/mwpy",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/lib/condor",
    "/var/log",
    "/var/lib/dpkg",
    "/var/lib/apt",
)

# Not part of a project's build: skipped when hashing and copying --project.
PROJECT_SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        "build",
        "dist",
        "node_modules",
    }
)


class PoolError(Exception):
    """A failure to report as one line, without a traceback."""


def progress(message: str) -> None:
    """Say what a slow step is doing, on stderr so that --json stays parseable."""
    print(f"condor_pool: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# Paths
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where everything of one pool lives on the host, below BASE."""

    base: Path

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def partial_root(self) -> Path:
        """debootstrap writes here; renamed to `root` only when it succeeded."""
        return self.base / "root.partial"

    @property
    def marker(self) -> Path:
        """Written last, after every package is in: its absence means half-built."""
        return self.root / BUILD_MARKER

    @property
    def share(self) -> Path:
        return self.base / "share"

    @property
    def host_dir(self) -> Path:
        return self.base / "host"

    @property
    def host_config(self) -> Path:
        return self.host_dir / "condor_config"

    @property
    def token_dir(self) -> Path:
        return self.host_dir / "tokens.d"

    @property
    def token_file(self) -> Path:
        return self.token_dir / USER

    @property
    def token_key_hash(self) -> Path:
        return self.host_dir / "token.key.sha256"

    @property
    def pool_json(self) -> Path:
        return self.base / "pool.json"

    @property
    def lock_file(self) -> Path:
        return self.base / ".lock"

    @property
    def log_dir(self) -> Path:
        return self.base / "logs"

    def inside(self, path: str | Path) -> Path:
        """The host path of `path` as seen inside the root."""
        return self.root / str(path).lstrip("/")


@dataclasses.dataclass(frozen=True)
class Identity:
    """The job owner, with the same uid/gid on the host and in the root."""

    name: str
    uid: int
    gid: int


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------


def run(
    argv: Sequence[str],
    *,
    capture: bool = False,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    log: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure raise PoolError naming it and its last error line.

    With `log`, output goes to that file (long outputs such as debootstrap's
    would drown the caller's terminal) and its tail is quoted on failure.
    """
    stdout: int | IO[str] | None
    handle: IO[str] | None = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        handle = open(log, "a", encoding="utf-8")  # noqa: SIM115 - closed below
        handle.write(f"\n$ {' '.join(argv)}\n")
        handle.flush()
        stdout = handle
    else:
        stdout = subprocess.PIPE if capture else None
    try:
        result = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT if handle is not None else (subprocess.PIPE if capture else None),
            text=True,
            env=dict(env) if env is not None else None,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise PoolError(f"command not found: {argv[0]}") from exc
    except subprocess.TimeoutExpired as exc:
        raise PoolError(f"{' '.join(argv[:3])} ... took longer than {timeout:.0f} s") from exc
    finally:
        if handle is not None:
            handle.close()
    if check and result.returncode != 0:
        detail = ""
        if log is not None:
            detail = last_line(log.read_text(encoding="utf-8", errors="replace"))
            detail = f"{detail} (full log: {log})"
        elif capture:
            detail = last_line(result.stderr or "") or last_line(result.stdout or "")
        name = " ".join(argv[:4]) if argv[0] == "chroot" else " ".join(argv[:2])
        raise PoolError(f"`{name} ...` failed with exit {result.returncode}: {detail}".rstrip(": "))
    return result


def last_line(text: str) -> str:
    """The last non-blank line of a command's output, to make one-line errors."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def write_if_changed(path: Path, content: str | bytes, mode: int = 0o644) -> bool:
    """Write atomically, and only when different, so repeated `up`s touch nothing."""
    data = content.encode() if isinstance(content, str) else content
    try:
        if path.read_bytes() == data and (path.stat().st_mode & 0o7777) == mode:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True


def wait_until(what: str, probe: Callable[[], bool], timeout: float, interval: float = 0.25) -> float:
    """Poll `probe` until true; return the seconds it took, or fail at the deadline."""
    start = time.monotonic()
    deadline = start + timeout
    while True:
        if probe():
            return time.monotonic() - start
        if time.monotonic() >= deadline:
            raise PoolError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@contextlib.contextmanager
def locked(layout: Layout) -> Iterator[None]:
    """Serialise up/down/restart/purge: two test sessions may start at once."""
    layout.base.mkdir(parents=True, exist_ok=True)
    with open(layout.lock_file, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another condor_pool.py run on {layout.base}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------
# Mounts
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mountinfo that matters here."""

    mount_id: int
    target: str
    fstype: str


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mounts() -> list[Mount]:
    """Every mount of our mount namespace, in mount order."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            sep = fields.index("-")
            found.append(Mount(int(fields[0]), _unescape(fields[4]), fields[sep + 1]))
    return found


def mounts_under(path: Path) -> list[Mount]:
    """Mounts at `path` or below it, deepest (then most recent) first: unmount order."""
    top = str(path)
    below = [m for m in mounts() if m.target == top or m.target.startswith(top + "/")]
    order = {m.mount_id: i for i, m in enumerate(below)}
    return sorted(below, key=lambda m: (m.target.count("/"), order[m.mount_id]), reverse=True)


def is_mount_point(path: Path) -> bool:
    target = str(path)
    return any(m.target == target for m in mounts())


def unmount_all(path: Path, timeout: float = KILL_GRACE) -> int:
    """Unmount everything at or below `path`, deepest first; return how many.

    Every mount is made private first so that no unmount can propagate to
    the host's own mounts (an rbind of a shared /dev would otherwise take
    /dev/pts away from the host).
    """
    found = mounts_under(path)
    for mount in sorted(found, key=lambda m: m.target.count("/")):
        run(["mount", "--make-rprivate", mount.target], check=False, capture=True)
    count = 0
    deadline = time.monotonic() + timeout
    while True:
        remaining = mounts_under(path)
        if not remaining:
            return count
        mount = remaining[0]
        result = run(["umount", mount.target], check=False, capture=True)
        if result.returncode == 0:
            count += 1
            continue
        if time.monotonic() >= deadline:
            # Detaching is safe here: nothing of ours runs below `path` any
            # more, and a detached mount can no longer be reached from it.
            result = run(["umount", "--lazy", mount.target], check=False, capture=True)
            if result.returncode != 0:
                raise PoolError(f"cannot unmount {mount.target}: {last_line(result.stderr)}")
            count += 1
            continue
        time.sleep(0.2)


def bind(source: Path, target: Path, *, readonly: bool = False, recursive: bool = False) -> None:
    """Bind-mount and make the copy private so nothing propagates back to the host."""
    target.mkdir(parents=True, exist_ok=True)
    run(["mount", "--rbind" if recursive else "--bind", str(source), str(target)], capture=True)
    run(["mount", "--make-rprivate", str(target)], capture=True)
    if readonly:
        run(["mount", "-o", "remount,bind,ro", str(target)], capture=True)


def mount_root(layout: Layout, shares: Sequence[Share]) -> None:
    """Mount what the daemons and jobs need inside the root; skip what is mounted.

    The root is bind-mounted onto itself first: the starter unshares a mount
    namespace per job and that fails with EINVAL when the chroot's / is not a
    mount point.  /proc/sys is read-only inside so that nothing in the root
    can retune the host's kernel.
    """
    root = layout.root
    if not is_mount_point(root):
        bind(root, root)
    proc = root / "proc"
    if not is_mount_point(proc):
        run(["mount", "-t", "proc", "-o", "nosuid,nodev,noexec", "proc", str(proc)], capture=True)
    if not is_mount_point(proc / "sys"):
        bind(proc / "sys", proc / "sys", readonly=True)
    sys_dir = root / "sys"
    if not is_mount_point(sys_dir):
        sys_dir.mkdir(exist_ok=True)
        run(["mount", "-t", "sysfs", "-o", "ro,nosuid,nodev,noexec", "sysfs", str(sys_dir)], capture=True)
    dev = root / "dev"
    if not is_mount_point(dev):
        bind(Path("/dev"), dev, recursive=True)
    run_dir = root / "run"
    if not is_mount_point(run_dir):
        run(["mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "tmpfs", str(run_dir)], capture=True)
    (run_dir / "lock").mkdir(mode=0o1777, exist_ok=True)
    os.chmod(run_dir / "lock", 0o1777)
    prepare_condor_run_dirs(layout)
    mount_shares(layout, shares)


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


def root_pids(root: Path) -> list[int]:
    """PIDs whose root directory is the pool's root, compared by device and inode.

    Comparing the inode (not the readlink text) also catches jobs that the
    starter moved into a mount namespace of their own.
    """
    try:
        want = os.stat(root)
    except OSError:
        return []
    key = (want.st_dev, want.st_ino)
    me = os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/root")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == key:
            found.append(int(entry.name))
    return found


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def master_pids(root: Path) -> list[int]:
    return [pid for pid in root_pids(root) if process_name(pid) == "condor_master"]


def signal_all(pids: Sequence[int], signum: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def stop_processes(root: Path, *, hard: bool = False) -> int:
    """Stop every process running in the root, by PID; return how many there were.

    Normally condor_master gets SIGQUIT (HTCondor's fast shutdown: daemons stop,
    jobs are killed and the schedd records them as evicted); whatever is left
    after a deadline gets SIGTERM, then SIGKILL.  `hard` sends SIGKILL to all
    at once, like a power cut.
    """
    initial = root_pids(root)
    if not initial:
        return 0
    if hard:
        signal_all(initial, signal.SIGKILL)
    else:
        masters = [pid for pid in initial if process_name(pid) == "condor_master"]
        if masters:
            # The master waits for its daemons, which kill their jobs first.
            signal_all(masters, signal.SIGQUIT)
            with contextlib.suppress(PoolError):
                wait_until("condor_master to shut down", lambda: not master_pids(root), STOP_GRACE)
        if root_pids(root):
            signal_all(root_pids(root), signal.SIGTERM)
            with contextlib.suppress(PoolError):
                wait_until("processes to exit after SIGTERM", lambda: not root_pids(root), KILL_GRACE)
    for _ in range(3):
        left = root_pids(root)
        if not left:
            break
        signal_all(left, signal.SIGKILL)
        with contextlib.suppress(PoolError):
            wait_until("processes to exit after SIGKILL", lambda: not root_pids(root), KILL_GRACE)
    left = root_pids(root)
    if left:
        raise PoolError(f"processes still running in {root} after SIGKILL: {left}")
    return len(initial)


# --------------------------------------------------------------------------
# Commands inside the root
# --------------------------------------------------------------------------


def root_env(extra: Mapping[str, str] | None = None, home: str = "/root") -> dict[str, str]:
    """A clean environment: nothing of the host's (CONDOR_CONFIG!) leaks inside."""
    env = {"PATH": ROOT_PATH, "HOME": home, "LANG": "C.UTF-8", "TERM": os.environ.get("TERM", "dumb")}
    env.update(extra or {})
    return env


def in_root(
    layout: Layout,
    argv: Sequence[str],
    *,
    identity: Identity | None = None,
    cwd: str = "/",
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """The host command line that runs `argv` inside the root (as `identity` if given)."""
    cmd = ["chroot"]
    if identity is not None:
        cmd += [f"--userspec={identity.uid}:{identity.gid}", f"--groups={identity.gid}"]
    environment = [f"{key}={value}" for key, value in (env or root_env()).items()]
    return [
        *cmd,
        str(layout.root),
        "/usr/bin/env",
        "-i",
        *environment,
        "/bin/sh",
        "-c",
        'cd "$1" && shift && exec "$@"',
        "sh",
        cwd,
        *argv,
    ]


def root_run(
    layout: Layout,
    argv: Sequence[str],
    *,
    capture: bool = True,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    log: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a command as root inside the root."""
    return run(in_root(layout, argv, env=env), capture=capture, check=check, timeout=timeout, log=log)


# --------------------------------------------------------------------------
# Building the root
# --------------------------------------------------------------------------


def debian_mirror() -> str:
    """The Debian mirror the host already uses (deb822 or one-line sources)."""
    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    if deb822.exists():
        for stanza in deb822.read_text(encoding="utf-8").split("\n\n"):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.strip()
            suites = fields.get("suites", "").split()
            if "deb" in fields.get("types", "").split() and any(s == "bookworm" for s in suites):
                return fields.get("uris", "").split()[0]
    classic = Path("/etc/apt/sources.list")
    if classic.exists():
        for line in classic.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb" and not parts[2].endswith("-security"):
                return next(p for p in parts[1:] if not p.startswith("["))
    raise PoolError("cannot find the host's Debian mirror in /etc/apt/sources.list.d/debian.sources")


def ensure_debootstrap(layout: Layout) -> None:
    """Install bookworm's debootstrap on the host if missing (nothing newer, ever)."""
    if shutil.which("debootstrap"):
        return
    progress("installing debootstrap on the host (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = layout.log_dir / "host-apt.log"
    install = ["apt-get", "install", "-y", "-q", "debootstrap"]
    if run(install, check=False, env=env, log=log).returncode != 0:
        run(["apt-get", "update", "-q"], env=env, log=log)
        run(install, env=env, log=log)


def discard_tree(layout: Layout, path: Path) -> None:
    """Delete a root only once nothing runs in it and nothing is mounted below it."""
    if not path.exists():
        return
    stop_processes(path, hard=True)
    unmount_all(path)
    if mounts_under(path):
        raise PoolError(f"refusing to delete {path}: something is still mounted below it")
    run(["rm", "-rf", "--one-file-system", str(path)], capture=True)


def root_suite(layout: Layout, asked: str | None) -> str:
    """The suite of BASE's root: the one it was built with, or the one asked for (default trixie) for a new root."""
    built = layout.marker.read_text(encoding="utf-8").split()[0] if layout.marker.exists() else None
    if built is not None and asked is not None and asked != built:
        raise PoolError(f"{layout.base} holds a {built} root; use another --base for --suite {asked}")
    return built or asked or SUITE


def build_root(layout: Layout, suite: str = SUITE) -> bool:
    """Make sure a complete root exists; return True if it had to be built.

    debootstrap writes into root.partial, which becomes `root` only on success;
    packages are installed next and the marker file is written last, so an
    interrupted build is detected and finished or redone on the next `up`.
    """
    if layout.marker.exists():
        return False
    built = False
    if not (layout.root / "usr/bin/apt-get").exists():
        ensure_debootstrap(layout)
        discard_tree(layout, layout.partial_root)
        discard_tree(layout, layout.root)
        mirror = debian_mirror()
        progress(f"debootstrap --variant=minbase {suite} from {mirror} (about a minute)")
        log = layout.log_dir / "debootstrap.log"
        log.unlink(missing_ok=True)
        run(
            ["debootstrap", "--variant=minbase", "--components=main", suite, str(layout.partial_root), mirror],
            log=log,
        )
        unmount_all(layout.partial_root)
        layout.partial_root.rename(layout.root)
        built = True
    return built


def install_packages(layout: Layout, suite: str = SUITE) -> None:
    """apt-get the pool's packages inside the (mounted) root; no service is started."""
    # Debian's convention for chroots: tell maintainer scripts not to start daemons.
    write_if_changed(layout.inside("/usr/sbin/policy-rc.d"), "#!/bin/sh\nexit 101\n", 0o755)
    # sid's Release file can read as expired on a snapshot mirror: do not refuse it for that.
    valid_until = 'Acquire::Check-Valid-Until "false";\n' if suite == "sid" else ""
    write_if_changed(
        layout.inside("/etc/apt/apt.conf.d/99mwpy"),
        'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' + valid_until,
    )
    env = root_env({"DEBIAN_FRONTEND": "noninteractive"})
    log = layout.log_dir / "root-apt.log"
    progress(f"apt-get install {' '.join(PACKAGES)} inside the root")
    root_run(layout, ["apt-get", "update", "-q"], env=env, log=log)
    root_run(layout, ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES], env=env, log=log)
    root_run(layout, ["apt-get", "clean"], env=env, log=log)


def root_hosts(host_hosts: str, nodes: int) -> str:
    """The root's /etc/hosts: the host's, plus node 2's name; with two nodes this host's name is HOST_ADDR.

    Node 2's name must resolve without DNS (its namespace has none): else every daemon there retries
    getaddrinfo 20 times, 3 s apart, before it starts.  With two nodes, a master that advertises this
    host's name (mwpy's default) must be reachable from node 2, as on a site whose DNS gives the
    submit host a routable address: the name moves from loopback to HOST_ADDR (inside the root only).
    """
    lines = host_hosts.rstrip("\n").splitlines()
    if nodes > 1:
        me = {socket.gethostname(), socket.gethostname().split(".")[0]}
        kept = []
        for line in lines:
            fields = line.split("#", 1)[0].split()
            if fields and fields[0].startswith("127.") and me & set(fields[1:]):
                names = [name for name in fields[1:] if name not in me]
                if names:
                    kept.append(" ".join([fields[0], *names]))
                continue
            kept.append(line)
        lines = [*kept, f"{HOST_ADDR} {' '.join(sorted(me))}"]
    return "\n".join([*lines, "# mwpy pool nodes", f"{NODE2_ADDR} {NODE2_HOSTNAME}"]) + "\n"


def sync_host_files(layout: Layout, nodes: int = 1) -> None:
    """Copy the host's DNS, hosts and CA bundle in: pip and condor need them."""
    for name in ("/etc/resolv.conf", "/etc/hosts"):
        target = layout.inside(name)
        if target.is_symlink():
            target.unlink()
        content = Path(name).read_bytes()
        if name == "/etc/hosts":
            content = root_hosts(content.decode("utf-8", errors="replace"), nodes).encode()
        write_if_changed(target, content)
    if HOST_CA_BUNDLE.exists():
        # The host may trust extra CAs (an egress proxy): pip in the root must too.
        write_if_changed(layout.inside(ROOT_CA_BUNDLE), HOST_CA_BUNDLE.read_bytes())


# --------------------------------------------------------------------------
# Users
# --------------------------------------------------------------------------


def _root_passwd(layout: Layout) -> dict[str, tuple[int, int]]:
    users = {}
    with contextlib.suppress(OSError):
        for line in layout.inside("/etc/passwd").read_text(encoding="utf-8").splitlines():
            parts = line.split(":")
            if len(parts) >= 4:
                users[parts[0]] = (int(parts[2]), int(parts[3]))
    return users


def _ids_in_root(layout: Layout, index: int) -> set[int]:
    ids = set()
    for name in ("/etc/passwd", "/etc/group"):
        with contextlib.suppress(OSError):
            for line in layout.inside(name).read_text(encoding="utf-8").splitlines():
                parts = line.split(":")
                if len(parts) > index and parts[index].isdigit():
                    ids.add(int(parts[index]))
    return ids


def ensure_identity(layout: Layout) -> Identity:
    """The user `mwpy` with one uid/gid on the host and in the root.

    The host gets the user too, so that `ls -l` of the shared folders reads
    `mwpy` and tests can chown files to it by name.
    """
    in_root_users = _root_passwd(layout)
    try:
        host = pwd.getpwnam(USER)
        uid, gid = host.pw_uid, host.pw_gid
    except KeyError:
        if USER in in_root_users:
            uid, gid = in_root_users[USER]
        else:
            taken = _ids_in_root(layout, 2)
            uid = FIRST_UID
            while uid in taken or _host_id_taken(uid):
                uid += 1
            gid = uid
        progress(f"creating host user {USER} (uid {uid}, gid {gid})")
        if not _host_group_exists(gid):
            run(["groupadd", "-g", str(gid), USER], capture=True)
        run(
            [
                "useradd",
                "-u",
                str(uid),
                "-g",
                str(gid),
                "-M",
                "-d",
                "/nonexistent",
                "-s",
                "/usr/sbin/nologin",
                "-c",
                "mwpy HTCondor pool job owner",
                USER,
            ],
            capture=True,
        )
    if USER in in_root_users:
        if in_root_users[USER] != (uid, gid):
            raise PoolError(
                f"user {USER} has uid/gid {in_root_users[USER]} in the root but {(uid, gid)} "
                "on the host; run `purge` and `up` again"
            )
    else:
        if not _root_group_has(layout, gid):
            root_run(layout, ["groupadd", "-g", str(gid), USER])
        root_run(layout, ["useradd", "-u", str(uid), "-g", str(gid), "-m", "-s", "/bin/bash", USER])
    return Identity(USER, uid, gid)


def _host_id_taken(value: int) -> bool:
    try:
        pwd.getpwuid(value)
        return True
    except KeyError:
        return _host_group_exists(value)


def _host_group_exists(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
        return True
    except KeyError:
        return False


def _root_group_has(layout: Layout, gid: int) -> bool:
    with contextlib.suppress(OSError):
        for line in layout.inside("/etc/group").read_text(encoding="utf-8").splitlines():
            parts = line.split(":")
            if len(parts) > 2 and parts[2] == str(gid):
                return True
    return False


def identity_of(layout: Layout) -> Identity:
    """The job owner of an existing root (for exec/status, which build nothing)."""
    users = _root_passwd(layout)
    if USER not in users:
        raise PoolError(f"no user {USER} in {layout.root}; run `up` first")
    uid, gid = users[USER]
    return Identity(USER, uid, gid)


# --------------------------------------------------------------------------
# Shares
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Share:
    """A host folder seen at the same path inside the root."""

    path: Path
    readonly: bool = False


def check_share(layout: Layout, share: Share) -> None:
    """Refuse shares that would shadow the root's system or contain the root itself."""
    path = str(share.path)
    if not share.path.is_dir():
        raise PoolError(f"--share {path}: not a directory")
    if path == "/":
        raise PoolError("--share /: refusing to share the whole host")
    base = str(layout.base)
    if path == base or base.startswith(path + "/") or path.startswith(str(layout.root) + "/"):
        raise PoolError(f"--share {path}: must not contain or lie inside the pool's base {base}")
    for prefix in RESERVED_PREFIXES:
        if path == prefix or path.startswith(prefix + "/"):
            raise PoolError(f"--share {path}: {prefix} belongs to the root's own system")


def same_directory(a: Path, b: Path) -> bool:
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def mount_shares(layout: Layout, shares: Sequence[Share]) -> None:
    """Bind each share at its own path inside the root, parents before children."""
    for share in sorted(shares, key=lambda s: str(s.path).count("/")):
        target = layout.inside(share.path)
        if same_directory(share.path, target):
            continue
        if is_mount_point(target):
            raise PoolError(f"{target} is mounted but is not {share.path}; run `down` first")
        bind(share.path, target, readonly=share.readonly)


def shared_at_same_path(layout: Layout, path: Path) -> bool:
    """True if host `path` is the very same folder inside the root."""
    return same_directory(path, layout.inside(path))


# --------------------------------------------------------------------------
# HTCondor configuration
# --------------------------------------------------------------------------


def pool_address(nodes: int) -> str:
    """The address every submit-node daemon listens on: loopback, or the host side of the veth with two nodes."""
    return HOST_ADDR if nodes > 1 else "127.0.0.1"


def pool_config(port: int, cpus: int, nodes: int = 1, *, stock_cycles: bool = False) -> str:
    """The root's HTCondor configuration, read after Debian's and minicondor's.

    ``stock_cycles`` leaves HTCondor's own negotiator, schedd and update intervals (for a benchmark's
    comparison with a default pool); tests need the fast ones.
    """
    address = pool_address(nodes)
    node_attrs = (
        ""
        if nodes == 1
        else f"""
# Two nodes: each startd says which node it is, so a test can send jobs to node 2.
MwpyNode = 1
STARTD_ATTRS = $(STARTD_ATTRS) MwpyNode
# ... and the two differ in memory as well (MB advertised, shared by the slots; node 2: {NODE2_MEMORY}),
# so that a task needing much memory runs on node 2 only (tests/test_condor_nodes.py, slave shapes).
MEMORY = {NODE1_MEMORY}
# The submit host's name ("vm", say) is not in UID_DOMAIN: without this, jobs from the other
# node's schedd run as "nobody" and cannot write the shared folders their owner can.
TRUST_UID_DOMAIN = True
"""
    )
    return f"""\
# Written by mwpy's tools/condor_pool.py; rewritten by every `up`.

# Never let condor_master (root, shared /proc/sys) retune the host's kernel.
ENABLE_KERNEL_TUNING = False

# One fixed address and port: loopback, or with a second node the host side of its veth.
CONDOR_HOST = {address}
COLLECTOR_HOST = {address}:{port}
SHARED_PORT_PORT = {port}
NETWORK_INTERFACE = {address}
BIND_ALL_INTERFACES = False
ENABLE_IPV6 = False
{node_attrs}
# Fixed domains: the host client config uses the same ones, else jobs that
# rely on the shared filesystem never match.
UID_DOMAIN = {DOMAIN}
FILESYSTEM_DOMAIN = {DOMAIN}
TRUST_DOMAIN = {DOMAIN}

# Jobs see the shared folders at their own paths, not a private scratch /tmp.
MOUNT_UNDER_SCRATCH =

# A test machine: run jobs at once and never suspend or preempt them.
use POLICY : ALWAYS_RUN_JOBS

# Memory enforcement, opt-in per job (+MwpyEnforceMemory = true; tests/test_condor_memory.py): such a job is
# held, as a site's cgroup policy holds it, once it uses more memory than it asked for. Other jobs never are.
SYSTEM_PERIODIC_HOLD = (MwpyEnforceMemory =?= true) && (MemoryUsage =!= undefined) && (MemoryUsage > RequestMemory)
SYSTEM_PERIODIC_HOLD_REASON = strcat("memory usage ", MemoryUsage, " MB exceeded request_memory ", RequestMemory, " MB")
NUM_CPUS = {cpus}
START_SCHEDULER_UNIVERSE = True
START_LOCAL_UNIVERSE = True

# After a `restart` (a simulated reboot) the schedd tries to reconnect to the
# jobs that were running until their job lease expires, 40 minutes by default;
# 20 s (the least condor_submit accepts) makes them run again ~20 s later.
JOB_DEFAULT_LEASE_DURATION = {JOB_LEASE}
# Fixed shared-port socket names: the schedd keeps its address across restarts.
SCHEDD_ARGS = -sock schedd
STARTD_ARGS = -sock startd

{"" if stock_cycles else FAST_CYCLES}"""


#: Submit -> done in seconds instead of a minute (left out by ``up --stock-cycles``).
FAST_CYCLES = """\
# Fast cycles: submit -> done in seconds instead of a minute.
NEGOTIATOR_INTERVAL = 1
NEGOTIATOR_MIN_INTERVAL = 1
NEGOTIATOR_CYCLE_DELAY = 1
SCHEDD_INTERVAL = 1
SCHEDD_MIN_INTERVAL = 1
POLLING_INTERVAL = 1
UPDATE_INTERVAL = 2
STARTER_UPDATE_INTERVAL = 2
SHADOW_QUEUE_UPDATE_INTERVAL = 2
PERIODIC_EXPR_INTERVAL = 5
"""


def client_config(port: int, token_dir: str, log_dir: str, nodes: int = 1) -> str:
    """A client-only configuration: what host programs (and the readiness probe) use."""
    address = pool_address(nodes)
    return f"""\
# Written by mwpy's tools/condor_pool.py: client configuration for the pool.
CONDOR_HOST = {address}
COLLECTOR_HOST = {address}:{port}
NETWORK_INTERFACE = {address}
BIND_ALL_INTERFACES = False
ENABLE_IPV6 = False
UID_DOMAIN = {DOMAIN}
FILESYSTEM_DOMAIN = {DOMAIN}
TRUST_DOMAIN = {DOMAIN}
JOB_DEFAULT_LEASE_DURATION = {JOB_LEASE}
SEC_CLIENT_AUTHENTICATION_METHODS = IDTOKENS
SEC_TOKEN_DIRECTORY = {token_dir}
SEC_TOKEN_SYSTEM_DIRECTORY = {token_dir}
LOG = {log_dir}
"""


def prepare_condor_run_dirs(layout: Layout) -> None:
    """/run is a fresh tmpfs each `up`: recreate what Debian's unit file would."""
    users = _root_passwd(layout)
    if "condor" not in users:
        return
    uid, gid = users["condor"]
    for name in ("/run/condor", "/run/lock/condor"):
        path = layout.inside(name)
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, uid, gid)
        os.chmod(path, 0o755)


def condor_value(layout: Layout, name: str) -> str:
    result = root_run(layout, ["condor_config_val", name], check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


# --------------------------------------------------------------------------
# Venv and project
# --------------------------------------------------------------------------


def project_hash(project: Path) -> str:
    """A digest of the project's files (paths, exec bits, contents), to skip reinstalls."""
    digest = hashlib.sha256()
    for directory, subdirs, files in os.walk(project):
        subdirs[:] = sorted(d for d in subdirs if not _skip_dir(d))
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = Path(directory) / name
            rel = path.relative_to(project).as_posix()
            digest.update(rel.encode() + b"\0")
            if path.is_symlink():
                digest.update(b"L" + os.readlink(path).encode())
                continue
            with contextlib.suppress(OSError):
                digest.update(b"X" if os.access(path, os.X_OK) else b"F")
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _skip_dir(name: str) -> bool:
    return name in PROJECT_SKIP_DIRS or name.endswith(".egg-info")


def ensure_venv(layout: Layout) -> None:
    """A venv of the root's python3 (3.13) at /opt/mwpy/venv, the jobs' Python.

    Also a wrapper, JOB_PYTHON, for job executables: the scheduler universe
    starts a job with argv[0] = "condor_scheduniv_exec.C.P", and a venv's
    python then cannot find its pyvenv.cfg and runs as the system python.
    The wrapper execs the venv's python by its full path in any universe.
    """
    if not layout.inside(f"{VENV}/bin/python").exists():
        progress(f"creating {VENV} inside the root")
        root_run(layout, ["python3", "-m", "venv", VENV])
    write_if_changed(layout.inside(JOB_PYTHON), f'#!/bin/sh\nexec {VENV}/bin/python "$@"\n', 0o755)


def pip_env(layout: Layout) -> dict[str, str]:
    """pip trusts what the host trusts (see sync_host_files)."""
    extra = {"PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if layout.inside(ROOT_CA_BUNDLE).exists():
        extra["PIP_CERT"] = ROOT_CA_BUNDLE
    return root_env(extra)


def install_project(layout: Layout, project: Path) -> bool:
    """pip install a copy of the project into the root's venv if its files changed.

    A copy (not the checkout itself) so that the build leaves nothing in the
    repository and the project need not be shared into the root.
    """
    if not (project / "pyproject.toml").exists() and not (project / "setup.py").exists():
        raise PoolError(f"--project {project}: no pyproject.toml or setup.py there")
    wanted = project_hash(project)
    stamp = layout.inside(PROJECT_STAMP)
    if stamp.exists() and stamp.read_text(encoding="utf-8").strip() == wanted:
        return False
    progress(f"pip install {project} into {VENV}")
    copy = layout.inside(PROJECT_COPY)
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(
        project,
        copy,
        symlinks=True,
        ignore=lambda _d, names: [n for n in names if _skip_dir(n) or n.endswith((".pyc", ".pyo"))],
    )
    stamp.unlink(missing_ok=True)
    log = layout.log_dir / "pip.log"
    pip = f"{VENV}/bin/pip"
    # pip rebuilds and reinstalls a local folder even when the version is unchanged.
    root_run(layout, [pip, "install", PROJECT_COPY], env=pip_env(layout), log=log)
    write_if_changed(stamp, wanted + "\n")
    return True


# --------------------------------------------------------------------------
# Sysctl guard
# --------------------------------------------------------------------------


def read_sysctls() -> dict[str, str]:
    values = {}
    for name in WATCHED_SYSCTLS:
        with contextlib.suppress(OSError):
            values[name] = Path("/proc/sys", name).read_text(encoding="utf-8").strip()
    return values


def check_sysctls(before: Mapping[str, str]) -> None:
    """Fail loudly (after restoring) if anything changed the host's kernel settings."""
    after = read_sysctls()
    changed = {name: (value, after.get(name)) for name, value in before.items() if after.get(name) != value}
    if not changed:
        return
    for name, (value, _) in changed.items():
        with contextlib.suppress(OSError):
            Path("/proc/sys", name).write_text(value + "\n", encoding="utf-8")
    names = ", ".join(f"{n} {old!r}->{new!r}" for n, (old, new) in changed.items())
    raise PoolError(f"host sysctls changed while starting the pool (restored): {names}")


# --------------------------------------------------------------------------
# Running the pool
# --------------------------------------------------------------------------


def port_in_use(port: int, address: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((address, port)) == 0


def start_master(layout: Layout, port: int, nodes: int = 1) -> None:
    """Start condor_master in the root (it daemonizes) after the safety checks."""
    if condor_value(layout, "ENABLE_KERNEL_TUNING").lower() != "false":
        raise PoolError("refusing to start: ENABLE_KERNEL_TUNING is not False in the root's config")
    address = pool_address(nodes)
    if port_in_use(port, address):
        raise PoolError(f"port {address}:{port} is already in use by something outside the pool")
    _start_condor_master(layout, in_root(layout, ["/usr/sbin/condor_master"]), "condor_master.out")
    if nodes > 1:
        start_node2(layout)


def _start_condor_master(layout: Layout, argv: Sequence[str], log_name: str) -> None:
    """Run a condor_master command line (it daemonizes), its early output to BASE/logs/LOG_NAME."""
    log = layout.log_dir / log_name
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a", encoding="utf-8") as handle:
        result = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            check=False,
        )
    if result.returncode != 0:
        raise PoolError(f"condor_master failed to start (exit {result.returncode}); see {log}")


# --------------------------------------------------------------------------
# The second node: a network namespace, a veth pair, its own condor_master
# --------------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(["ip", *args], capture=True, check=check, timeout=30)


def netns_exists() -> bool:
    return NETNS in _ip("netns", "list", check=False).stdout.split()


def veth_exists() -> bool:
    return _ip("link", "show", VETH_HOST, check=False).returncode == 0


def check_node_net_free() -> None:
    """Refuse to build the node network when its /24 is already used on this machine by anything else."""
    for line in _ip("-o", "-4", "addr", "show").stdout.splitlines():
        fields = line.split()
        device = fields[1].split("@")[0] if len(fields) > 1 else ""
        if len(fields) > 3 and fields[3].startswith(f"{NODE_NET}.") and device != VETH_HOST:
            raise PoolError(f"{NODE_NET}.0/{NODE_PREFIX} is already used on this machine by {device}; not touching it")


def ensure_node_network() -> None:
    """Create the namespace and the veth pair (idempotent): HOST_ADDR on the host, NODE2_ADDR inside.

    Only these two addresses, in a /24 no other interface uses, and no routes beyond the /24:
    the second node reaches the submit node and nothing else.
    """
    check_node_net_free()
    if not netns_exists():
        _ip("netns", "add", NETNS)
    if not veth_exists():
        _ip("link", "add", VETH_HOST, "type", "veth", "peer", "name", VETH_NODE)
        _ip("link", "set", VETH_NODE, "netns", NETNS)
    if f"{HOST_ADDR}/" not in _ip("-o", "-4", "addr", "show", "dev", VETH_HOST).stdout:
        _ip("addr", "add", f"{HOST_ADDR}/{NODE_PREFIX}", "dev", VETH_HOST)
    _ip("link", "set", VETH_HOST, "up")
    inside = ("netns", "exec", NETNS, "ip")
    if f"{NODE2_ADDR}/" not in _ip(*inside, "-o", "-4", "addr", "show", "dev", VETH_NODE).stdout:
        _ip(*inside, "addr", "add", f"{NODE2_ADDR}/{NODE_PREFIX}", "dev", VETH_NODE)
    _ip(*inside, "link", "set", VETH_NODE, "up")
    _ip(*inside, "link", "set", "lo", "up")


def remove_node_network() -> bool:
    """Delete the namespace and the veth pair; whether there was anything to delete.

    Refuses while a process still runs in the namespace (`down` stops them first).
    """
    removed = False
    if netns_exists():
        left = _ip("netns", "pids", NETNS, check=False).stdout.split()
        if left:
            raise PoolError(f"processes still run in network namespace {NETNS}: {' '.join(left)}")
        _ip("netns", "delete", NETNS)
        removed = True
    # The veth normally goes with the namespace that held its peer, but the kernel removes it a moment
    # later: wait for that (bounded), and delete it ourselves only if it stays.
    with contextlib.suppress(PoolError):
        wait_until(f"veth {VETH_HOST} to go with its namespace", lambda: not veth_exists(), 5.0, 0.1)
    if veth_exists():
        _ip("link", "delete", VETH_HOST, check=False)
        removed = True
        if veth_exists():
            raise PoolError(f"cannot delete veth {VETH_HOST}")
    return removed


def node2_env() -> dict[str, str]:
    """The second node's configuration: the pool's, overridden by environment (inherited by its daemons).

    It runs a startd (jobs) and a schedd (a second, remote schedd for --schedd tests), with its
    own address, host name and state folders, and reports to the collector on HOST_ADDR.
    """
    return root_env(
        {
            "_condor_DAEMON_LIST": "MASTER STARTD SCHEDD",
            "_condor_NETWORK_INTERFACE": NODE2_ADDR,
            "_condor_NETWORK_HOSTNAME": NODE2_HOSTNAME,
            "_condor_LOCAL_DIR": NODE2_LOCAL_DIR,
            "_condor_MwpyNode": "2",
            "_condor_MEMORY": str(NODE2_MEMORY),
        }
    )


def prepare_node2_dirs(layout: Layout) -> None:
    """The second node's LOCAL_DIR folders, as Debian's package makes them for the first node."""
    users = _root_passwd(layout)
    if "condor" not in users:
        raise PoolError("the root has no condor user; is minicondor installed?")
    uid, gid = users["condor"]
    for sub in ("run/condor", "log/condor", "lock/condor", "spool/condor", "lib/condor/execute", "lib/condor/cred_dir"):
        path = layout.inside(f"{NODE2_LOCAL_DIR}/{sub}")
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, uid, gid)
        os.chmod(path, 0o755 if sub != "lib/condor/cred_dir" else 0o700)


def start_node2(layout: Layout) -> None:
    """Start the second node's condor_master inside the namespace, with a UTS namespace of its own."""
    ensure_node_network()
    prepare_node2_dirs(layout)
    chroot = in_root(layout, ["/usr/sbin/condor_master"], env=node2_env())
    argv = ["ip", "netns", "exec", NETNS, "unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"']
    _start_condor_master(layout, [*argv, NODE2_HOSTNAME, *chroot], "condor_master.node2.out")


def probe_env() -> dict[str, str]:
    """The readiness probe talks like the host will: IDTOKENS over 127.0.0.1."""
    return root_env({"CONDOR_CONFIG": ROOT_CLIENT_CONFIG})


def pool_ready(layout: Layout, nodes: int = 1) -> bool:
    """Collector, negotiator, schedd and a startd slot answer, and WRITE is allowed.

    With two nodes, node 2's slot and schedd must be there too.  Raises if
    condor_master died, so that a broken pool fails at once instead of at
    the deadline.
    """
    require_master(layout)
    if not layout.inside(ROOT_TOKEN_DIR).joinpath(USER).exists():
        return False
    ads = root_run(
        layout, ["condor_status", "-any", "-af", "MyType", "State"], check=False, env=probe_env(), timeout=30
    )
    if ads.returncode != 0:
        return False
    kinds = [line.split()[0] for line in ads.stdout.splitlines() if line.split()]
    slots = [line for line in ads.stdout.splitlines() if line.startswith("Machine ") and "Unclaimed" in line]
    if not ({"Collector", "Negotiator", "Scheduler"} <= set(kinds) and slots):
        return False
    if nodes > 1:
        names = root_run(
            layout, ["condor_status", "-any", "-af", "MyType", "Machine"], check=False, env=probe_env(), timeout=30
        )
        if not {f"Machine {NODE2_HOSTNAME}", f"Scheduler {NODE2_HOSTNAME}"} <= set(names.stdout.splitlines()):
            return False
    ping = root_run(
        layout, ["condor_ping", "-type", "SCHEDD", "-table", "WRITE"], check=False, env=probe_env(), timeout=30
    )
    return ping.returncode == 0 and "ALLOW" in ping.stdout


def ensure_token(layout: Layout) -> bool:
    """An IDTOKEN for mwpy@DOMAIN, made by the pool's own key; remade if the key changed."""
    key = layout.inside(POOL_KEY)
    if not key.exists():
        return False
    key_hash = hashlib.sha256(key.read_bytes()).hexdigest()
    current = layout.token_key_hash.read_text(encoding="utf-8").strip() if layout.token_key_hash.exists() else ""
    inner = layout.inside(ROOT_TOKEN_DIR) / USER
    if current == key_hash and layout.token_file.exists() and inner.exists():
        return True
    result = root_run(layout, ["condor_token_create", "-identity", f"{USER}@{DOMAIN}"])
    token = result.stdout.strip()
    if not token:
        raise PoolError("condor_token_create printed no token")
    for directory in (layout.token_dir, layout.inside(ROOT_TOKEN_DIR)):
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        write_if_changed(directory / USER, token + "\n", 0o600)
    write_if_changed(layout.token_key_hash, key_hash + "\n")
    return True


def wait_ready(layout: Layout, timeout: float, nodes: int = 1) -> float:
    """Wait for the pool to be usable by the host; return the seconds it took."""
    start = time.monotonic()

    def key_and_token() -> bool:
        require_master(layout)
        return ensure_token(layout)

    wait_until("the pool's signing key", key_and_token, timeout)
    remaining = max(1.0, timeout - (time.monotonic() - start))
    wait_until("collector, negotiator, schedd and a free slot", lambda: pool_ready(layout, nodes), remaining)
    return time.monotonic() - start


def require_master(layout: Layout) -> None:
    """Fail at once, not at the deadline, when condor_master has died."""
    if not master_pids(layout.root):
        raise PoolError(f"condor_master is not running; see {layout.inside('/var/log/condor/MasterLog')}")


# --------------------------------------------------------------------------
# Facts
# --------------------------------------------------------------------------


def facts(layout: Layout, identity: Identity, state: str, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What a test needs to use the pool; also written to BASE/pool.json."""
    condor_version = ""
    version_file = layout.inside("/var/lib/dpkg/status")
    with contextlib.suppress(OSError):
        block = version_file.read_text(encoding="utf-8").split("Package: minicondor\n", 1)[1]
        condor_version = next(
            line.split(":", 1)[1].strip() for line in block.splitlines() if line.startswith("Version:")
        )
    python_version = ""
    with contextlib.suppress(OSError):
        cfg = layout.inside(f"{VENV}/pyvenv.cfg").read_text(encoding="utf-8")
        python_version = next(line.split("=", 1)[1].strip() for line in cfg.splitlines() if line.startswith("version"))
    script = str(Path(__file__).resolve())
    return {
        "state": state,
        "base": str(layout.base),
        "root": str(layout.root),
        "share": str(layout.share),
        "shares": settings.get("shares", []),
        "user": identity.name,
        "uid": identity.uid,
        "gid": identity.gid,
        "domain": DOMAIN,
        "condor_config": str(layout.host_config),
        "token_dir": str(layout.token_dir),
        "port": settings.get("port", DEFAULT_PORT),
        "collector": f"{pool_address(int(settings.get('nodes', 1)))}:{settings.get('port', DEFAULT_PORT)}",
        "nodes": int(settings.get("nodes", 1)),
        "address": pool_address(int(settings.get("nodes", 1))),
        "node2": (
            {"address": NODE2_ADDR, "hostname": NODE2_HOSTNAME, "netns": NETNS, "schedd": NODE2_HOSTNAME}
            if int(settings.get("nodes", 1)) > 1
            else None
        ),
        "cpus": settings.get("cpus", DEFAULT_CPUS),
        "venv": VENV,
        "venv_python": f"{VENV}/bin/python",
        "job_python": JOB_PYTHON,
        "python_version": python_version,
        "suite": root_suite(layout, None),
        "condor_version": condor_version,
        "project": settings.get("project"),
        "project_hash": settings.get("project_hash"),
        "exec": [sys.executable, script, "exec", "--base", str(layout.base), "--"],
        "logs": str(layout.inside("/var/log/condor")),
    }


def load_settings(layout: Layout) -> dict[str, Any]:
    """The settings of the last `up` (shares, port, cpus, project), from pool.json."""
    try:
        data = json.loads(layout.pool_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_facts(layout: Layout, data: Mapping[str, Any]) -> None:
    write_if_changed(layout.pool_json, json.dumps(data, indent=2) + "\n")


def print_facts(data: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(data, indent=2))
        return
    for key, value in data.items():
        shown = " ".join(str(v) for v in value) if isinstance(value, list) else value
        print(f"{key}: {shown}")


def pool_state(layout: Layout) -> str:
    """ "up" if condor_master runs in the mounted root, "down" if nothing is, else "partial"."""
    if not layout.root.exists():
        return "down"
    running = bool(master_pids(layout.root))
    mounted = bool(mounts_under(layout.root))
    if running and mounted:
        return "up"
    if not running and not mounted and not root_pids(layout.root):
        return "down"
    return "partial"


# --------------------------------------------------------------------------
# Subcommands
# --------------------------------------------------------------------------


def require_root() -> None:
    if os.geteuid() != 0:
        raise PoolError("must run as root (it mounts, chroots and manages users)")
    if sys.platform != "linux":
        raise PoolError("needs Linux")


def write_configs(layout: Layout, port: int, cpus: int, nodes: int = 1, *, stock_cycles: bool = False) -> bool:
    """Write the pool's configuration and both client configurations; whether the pool's changed."""
    pool = pool_config(port, cpus, nodes, stock_cycles=stock_cycles)
    changed = write_if_changed(layout.inside(CONDOR_CONFIG_FILE), pool)
    write_if_changed(layout.inside(ROOT_CLIENT_CONFIG), client_config(port, ROOT_TOKEN_DIR, "/tmp", nodes))
    layout.host_dir.mkdir(parents=True, exist_ok=True)
    (layout.host_dir / "log").mkdir(exist_ok=True)
    host_config = client_config(port, str(layout.token_dir), str(layout.host_dir / "log"), nodes)
    write_if_changed(layout.host_config, host_config)
    return changed


def ensure_master(layout: Layout, port: int, *, restart: bool, nodes: int = 1) -> None:
    """Start condor_master unless it runs; ``restart`` it (the queue stays) when its configuration changed."""
    if master_pids(layout.root) and restart:
        progress("configuration changed: restarting the daemons (the job queue stays)")
        stop_processes(layout.root)
    elif not master_pids(layout.root) and root_pids(layout.root):
        progress("condor_master is gone but processes remain in the root: stopping them")
        stop_processes(layout.root)
    if nodes > 1:
        ensure_node_network()
    elif remove_node_network():  # one node now: its daemons were stopped by the restart above
        progress(f"one node: removed network namespace {NETNS} and veth {VETH_HOST}")
    if not master_pids(layout.root):
        progress("starting condor_master" + (" on both nodes" if nodes > 1 else ""))
        start_master(layout, port, nodes)
    elif nodes > 1 and not _ip("netns", "pids", NETNS).stdout.split():
        progress("starting condor_master on node 2")
        start_node2(layout)


def cmd_up(args: argparse.Namespace) -> int:
    """Build what is missing, mount, configure, start and wait: the one call a test session needs."""
    layout = Layout(args.base)
    started = time.monotonic()
    with locked(layout):
        before = read_sysctls()
        previous = load_settings(layout)
        shares = [Share(layout.share)] + [Share(p) for p in args.share] + [Share(p, True) for p in args.share_ro]
        for share in shares[1:]:
            check_share(layout, share)
        nodes = args.nodes if args.nodes is not None else int(previous.get("nodes") or 1)
        suite = root_suite(layout, args.suite)
        built = build_root(layout, suite)
        layout.share.mkdir(parents=True, exist_ok=True)
        mount_root(layout, [])
        sync_host_files(layout, nodes)
        if not layout.marker.exists():
            install_packages(layout, suite)
        identity = ensure_identity(layout)
        os.chown(layout.share, identity.uid, identity.gid)
        os.chmod(layout.share, 0o755)
        mount_shares(layout, shares)
        prepare_condor_run_dirs(layout)
        ensure_venv(layout)
        write_if_changed(layout.marker, f"{suite} {' '.join(PACKAGES)}\n")
        settings: dict[str, Any] = {
            "shares": [str(s.path) for s in shares],
            "port": args.port,
            "cpus": args.cpus,
            "project": previous.get("project"),
            "project_hash": previous.get("project_hash"),
        }
        if previous.get("state") == "up" and pool_state(layout) == "up":
            kept = [s for s in previous.get("shares", []) if s not in settings["shares"]]
            settings["shares"] += [s for s in kept if shared_at_same_path(layout, Path(s))]
        if args.project is not None:
            project = args.project.resolve()
            install_project(layout, project)
            settings["project"] = str(project)
            settings["project_hash"] = project_hash(project)
        elif not layout.inside(PROJECT_STAMP).exists():
            settings["project"] = settings["project_hash"] = None  # a rebuilt root has none
        settings["nodes"] = nodes
        config_changed = write_configs(layout, args.port, args.cpus, nodes, stock_cycles=args.stock_cycles)
        ensure_master(layout, args.port, restart=config_changed, nodes=nodes)
        waited = wait_ready(layout, args.timeout, nodes)
        check_sysctls(before)
        data = facts(layout, identity, "up", settings)
        save_facts(layout, data)
    total = time.monotonic() - started
    progress(f"pool up in {total:.1f} s ({'built the root, ' if built else ''}ready after {waited:.1f} s of waiting)")
    print_facts(data, args.json)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Stop everything in the root and unmount it, keeping the built root for the next `up`."""
    layout = Layout(args.base)
    if not layout.base.exists():
        return 0
    with locked(layout):
        before = read_sysctls()
        stopped = stop_processes(layout.root) if layout.root.exists() else 0
        unmounted = unmount_all(layout.root)
        unmounted += unmount_all(layout.partial_root)
        if remove_node_network():
            progress(f"removed network namespace {NETNS} and veth {VETH_HOST}")
        if mounts_under(layout.root) or root_pids(layout.root):
            raise PoolError(f"{layout.root} still has mounts or processes after down")
        check_sysctls(before)
        settings = load_settings(layout)
        if settings:
            settings["state"] = "down"
            save_facts(layout, settings)
    if stopped or unmounted:
        progress(f"pool down: stopped {stopped} processes, unmounted {unmounted} mounts")
    return 0


def cmd_restart(args: argparse.Namespace) -> int:
    """Kill daemons and jobs but keep the spool: a submit-host reboot, as tests need to simulate."""
    layout = Layout(args.base)
    with locked(layout):
        if pool_state(layout) == "down" or not layout.marker.exists():
            raise PoolError("the pool is down; run `up` first")
        before = read_sysctls()
        settings = load_settings(layout)
        identity = identity_of(layout)
        started = time.monotonic()
        nodes = int(settings.get("nodes") or 1)
        stopped = stop_processes(layout.root, hard=args.hard)
        prepare_condor_run_dirs(layout)
        start_master(layout, int(settings.get("port", DEFAULT_PORT)), nodes)
        waited = wait_ready(layout, args.timeout, nodes)
        check_sysctls(before)
        data = facts(layout, identity, "up", settings)
        save_facts(layout, data)
    progress(
        f"restarted: stopped {stopped} processes; usable again after {time.monotonic() - started:.1f} s "
        f"({waited:.1f} s waiting)"
    )
    print_facts(data, args.json)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Report the state and facts; exit 3 when not up, so scripts can test it directly."""
    layout = Layout(args.base)
    state = pool_state(layout)
    settings = load_settings(layout)
    try:
        identity = identity_of(layout)
    except PoolError:
        identity = Identity(USER, -1, -1)
    data: dict[str, Any] = {"state": state, "base": str(layout.base)}
    if layout.root.exists():
        data = facts(layout, identity, state, settings)
    print_facts(data, args.json)
    return 0 if state == "up" else 3


def cmd_exec(args: argparse.Namespace) -> int:
    """Run a command in the root as mwpy, in a same-path folder, passing its exit status through."""
    layout = Layout(args.base)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise PoolError("exec needs a command: exec [--cwd DIR] -- CMD ARGS...")
    if pool_state(layout) == "down":
        raise PoolError("the pool is down; run `up` first")
    identity = identity_of(layout)
    if args.cwd is None:
        cwd = Path.cwd()
        if not shared_at_same_path(layout, cwd):
            raise PoolError(f"current folder {cwd} is not shared into the pool; use --cwd or `up --share`")
    else:
        cwd = args.cwd
        if not layout.inside(cwd).is_dir():
            raise PoolError(f"--cwd {cwd}: no such folder inside the pool")
    extra = {"USER": identity.name, "LOGNAME": identity.name, "PATH": f"{VENV}/bin:{ROOT_PATH}"}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise PoolError(f"--env {item}: expected NAME=VALUE")
        extra[key] = value
    argv = in_root(layout, command, identity=identity, cwd=str(cwd), env=root_env(extra, home=f"/home/{identity.name}"))
    result = subprocess.run(argv, check=False)
    code = result.returncode
    return 128 - code if code < 0 else code


def cmd_purge(args: argparse.Namespace) -> int:
    """Delete BASE after `down`, refusing while anything is still mounted below it."""
    layout = Layout(args.base)
    if not layout.base.exists():
        return 0
    cmd_down(args)
    with locked(layout):
        for path in (layout.root, layout.partial_root):
            discard_tree(layout, path)
        if mounts_under(layout.base):
            raise PoolError(f"refusing to delete {layout.base}: something is mounted below it")
        for child in layout.base.iterdir():
            if child != layout.lock_file:
                run(["rm", "-rf", "--one-file-system", str(child)], capture=True)
    layout.lock_file.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        layout.base.rmdir()
    progress(f"purged {layout.base} (the host user {USER} stays)")
    return 0


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line like every other error here."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"condor_pool: error: {message} (see {self.prog} --help)\n")


def absolute_dir(value: str) -> Path:
    """argparse type: an absolute, symlink-free path, so same-path sharing is exact."""
    return Path(os.path.realpath(os.path.abspath(value)))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    default_base = absolute_dir(os.environ.get(BASE_ENV, str(DEFAULT_BASE)))
    common = Parser(add_help=False)
    common.add_argument(
        "--base", type=absolute_dir, default=default_base, help=f"pool folder (default: ${BASE_ENV} or {DEFAULT_BASE})"
    )
    as_json = Parser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print the facts as JSON")
    timeout = Parser(add_help=False)
    timeout.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to wait for the pool to become usable"
    )

    parser = Parser(
        prog="condor_pool.py",
        description="A personal HTCondor pool in a Debian trixie root, for mwpy's tests and CI.",
    )
    sub = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    up = sub.add_parser("up", parents=[common, as_json, timeout], help="build if needed, mount, start, wait")
    up.add_argument("--project", type=absolute_dir, help="pip install this project into the root's venv")
    up.add_argument(
        "--share",
        type=absolute_dir,
        action="append",
        default=[],
        help="host folder to see at the same path inside (read-write); repeatable",
    )
    up.add_argument(
        "--share-ro",
        type=absolute_dir,
        action="append",
        default=[],
        help="host folder to see at the same path inside, read-only; repeatable",
    )
    up.add_argument("--cpus", type=int, default=DEFAULT_CPUS, help="NUM_CPUS of the startd")
    up.add_argument(
        "--stock-cycles",
        action="store_true",
        help="HTCondor's own negotiator, schedd and update intervals instead of 1-2 s (for benchmarks; until next up)",
    )
    up.add_argument(
        "--suite",
        choices=SUITES,
        help="Debian suite of a new root (default trixie: HTCondor 23.9; sid: HTCondor 25); a built root keeps its own",
    )
    up.add_argument("--port", type=int, default=DEFAULT_PORT, help="collector port on 127.0.0.1")
    up.add_argument(
        "--nodes",
        type=int,
        choices=(1, 2),
        help=f"2: a second execute node (startd and schedd) in network namespace {NETNS} at {NODE2_ADDR}, "
        f"the submit node's daemons on {HOST_ADDR}; 1: loopback only (default: as last time, else 1)",
    )
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", parents=[common], help="stop everything in the root and unmount it")
    down.set_defaults(func=cmd_down)

    restart = sub.add_parser(
        "restart",
        parents=[common, as_json, timeout],
        help="stop all daemons and jobs, start again; the job queue stays",
    )
    restart.add_argument("--hard", action="store_true", help="SIGKILL everything at once, like a power cut")
    restart.set_defaults(func=cmd_restart)

    exe = sub.add_parser("exec", parents=[common], help="run a command inside the root as user mwpy")
    exe.add_argument("--cwd", type=absolute_dir, help="folder inside the root (default: current, if shared)")
    exe.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra environment")
    exe.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    exe.set_defaults(func=cmd_exec)

    status = sub.add_parser("status", parents=[common, as_json], help="up or down, and the facts (exit 3 if not up)")
    status.set_defaults(func=cmd_status)

    purge = sub.add_parser("purge", parents=[common], help="down, then delete the cached root and BASE")
    purge.set_defaults(func=cmd_purge)

    args = parser.parse_args(argv)
    if getattr(args, "cpus", 1) < 1:
        parser.error("--cpus must be at least 1")
    if not 0 < getattr(args, "port", 1) < 65536:
        parser.error("--port must be a TCP port")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    # Die quietly when stdout is a closed pipe (`status | head`), like other CLIs.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        require_root()
        code: int = args.func(args)
        return code
    except PoolError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except Exception as exc:  # one line, not a traceback (MWPY_POOL_DEBUG=1 shows it)
        if os.environ.get("MWPY_POOL_DEBUG"):
            raise
        if isinstance(exc, OSError) and exc.filename:
            return fail(f"{exc.strerror or exc}: {exc.filename}")
        return fail(f"unexpected {type(exc).__name__}: {exc}")


def fail(message: str, code: int = 1) -> int:
    print(f"condor_pool: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
