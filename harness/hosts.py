"""Hosts simulated on this machine: Linux network namespaces with their own hostname.

What "many hosts" means to dlscope is a worker that reaches the control plane only over a
network, with a name and a filesystem view of its own. As root, each simulated host is

- a network namespace (``ip netns``) whose only link is one end of a veth pair; the other end
  is a port of a bridge in the root namespace, which holds the control plane's address on
  this small LAN (``10.213.<n>.1/24``; host i is ``.1<i>``);
- processes started in it with their own UTS namespace (``unshare --uts``: the host name
  their ``socket.gethostname()`` reports) and mount namespace, where chosen directories of
  the control plane (its files, its home) are covered with an empty tmpfs: a path of the
  control plane's host that reached a worker would not be found there, as on a real host.

Cutting a host off is ``ip link set <its link> down``: its processes live on, silent, as
behind a failed switch port. Everything made here is named ``dls<pid>…`` after the process
that made it: ``close`` removes it on every exit path, and a later run removes what a
killed one left (``sweep``). Python rather than a shell script, so the e2e test's fixture
finalizers and the benchmark share one implementation that is type-checked and cleans up in
``finally`` blocks.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Host", "Hosts", "hosts_missing", "simulated_hosts", "sweep"]

_PREFIX = "dls"
_NETNS = re.compile(rf"^{_PREFIX}(\d+)-h\d+$")
_BRIDGE = re.compile(rf"^{_PREFIX}(\d+)br$")
_SUBNETS = ipaddress.IPv4Network("10.213.0.0/16")
# Sets the host name, covers the hidden directories, then becomes the command:
#   sh -c SCRIPT sh <hostname> <dir>... -- <command>...
_ENTER = (
    'set -e; hostname "$1"; shift; '
    'while [ "$1" != -- ]; do mount -t tmpfs -o size=64k,mode=0755 dlscope-elsewhere "$1"; '
    'shift; done; shift; exec "$@"'
)


def hosts_missing() -> str | None:
    """Why hosts cannot be simulated here, or None."""
    if os.geteuid() != 0:
        return "needs root, to create network namespaces (ip netns) and set host names"
    for tool in ("ip", "unshare", "hostname", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool!r} (iproute2 / util-linux), which is not installed"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"ip netns is unavailable here: {probe.stderr.strip() or probe.returncode}"
    return None


@dataclass(frozen=True)
class Host:
    """One simulated host."""

    name: str  # its host name: what its workers report
    netns: str
    link: str  # the veth end in the root namespace; down, the host is cut off
    address: str


@dataclass
class Hosts:
    """Simulated hosts on one bridge, and the processes started on them."""

    bridge: str
    # The root namespace's address on the bridge: where the hosts reach the control plane.
    address: str
    hosts: list[Host]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def run(
        self,
        host: Host,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        log: Path,
        hide: Sequence[Path] = (),
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` on ``host``, with ``hide`` covered by empty directories."""
        for directory in hide:
            if not directory.is_dir():
                raise ValueError(f"cannot hide {directory}: not a directory")
        log.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            "ip", "netns", "exec", host.netns,
            "unshare", "--uts", "--mount", "--propagation", "private", "--",
            "sh", "-c", _ENTER, "sh", host.name, *map(str, hide), "--", *command,
        ]  # fmt: skip
        with log.open("ab") as out:
            process = subprocess.Popen(
                argv, env=dict(env), cwd=cwd, stdout=out, stderr=subprocess.STDOUT
            )
        self.processes.append(process)
        return process

    def cut(self, host: Host) -> None:
        """Cut ``host`` off the network, as a failed cable or switch port would."""
        _ip("link", "set", host.link, "down")

    def restore(self, host: Host) -> None:
        _ip("link", "set", host.link, "up")

    def stop(self, process: subprocess.Popen[bytes], *, grace_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_s`` (a host cut off cannot say goodbye)."""
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        with contextlib.suppress(ValueError):
            self.processes.remove(process)

    def close(self) -> None:
        """Stop every process and remove the hosts and the bridge."""
        for process in list(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for process in list(self.processes):
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        self.processes.clear()
        for host in self.hosts:
            _remove_netns(host.netns)
        _ip("link", "del", self.bridge, check=False)


@contextlib.contextmanager
def simulated_hosts(count: int) -> Iterator[Hosts]:
    """``count`` hosts named ``dlscope-host-1`` …, removed (and their processes stopped)
    however the block ends."""
    if count < 1 or count > 9:
        raise ValueError(f"between 1 and 9 hosts can be simulated, not {count}")
    missing = hosts_missing()
    if missing is not None:
        raise RuntimeError(f"cannot simulate hosts: {missing}")
    sweep()
    tag = f"{_PREFIX}{os.getpid()}"
    subnet = _free_subnet()
    gateway = subnet.network_address + 1
    hosts = Hosts(bridge=f"{tag}br", address=str(gateway), hosts=[])
    try:
        _ip("link", "add", hosts.bridge, "type", "bridge")
        _ip("addr", "add", f"{gateway}/{subnet.prefixlen}", "dev", hosts.bridge)
        _ip("link", "set", hosts.bridge, "up")
        for i in range(1, count + 1):
            host = Host(
                name=f"dlscope-host-{i}",
                netns=f"{tag}-h{i}",
                link=f"{tag}v{i}",
                address=str(subnet.network_address + 10 + i),
            )
            hosts.hosts.append(host)
            _ip("netns", "add", host.netns)
            _ip("link", "add", host.link, "type", "veth", "peer", "name", "eth0",
                "netns", host.netns)  # fmt: skip
            _ip("link", "set", host.link, "master", hosts.bridge)
            _ip("link", "set", host.link, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/{subnet.prefixlen}",
                "dev", "eth0")  # fmt: skip
            _ip("-n", host.netns, "link", "set", "eth0", "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")
        yield hosts
    finally:
        hosts.close()


def sweep() -> None:
    """Remove the hosts and bridges left by runs whose process is gone (killed -9)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    for line in listed.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if (match := _NETNS.match(name)) and not _alive(int(match.group(1))):
            _remove_netns(name)
    links = subprocess.run(
        ["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True, check=False
    )
    for line in links.stdout.splitlines():
        name = line.split(":")[1].strip() if line.count(":") >= 2 else ""
        if (match := _BRIDGE.match(name)) and not _alive(int(match.group(1))):
            _ip("link", "del", name, check=False)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.213.0.0/16 no interface here is on; tried from one the pid picks, so two
    runs at once take different ones."""
    shown = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True, check=True)
    taken = {
        ipaddress.IPv4Interface(word).network
        for line in shown.stdout.splitlines()
        for word in line.split()
        if re.match(r"^\d+\.\d+\.\d+\.\d+/\d+$", word)
    }
    subnets = list(_SUBNETS.subnets(new_prefix=24))
    start = os.getpid() % len(subnets)
    for subnet in subnets[start:] + subnets[:start]:
        if not any(subnet.overlaps(other) for other in taken):
            return subnet
    raise RuntimeError(f"no free /24 left in {_SUBNETS} for simulated hosts")


def _remove_netns(name: str) -> None:
    # Processes keep a namespace alive: end them first, or its links outlive the delete.
    pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    for pid in pids.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    _ip("netns", "del", name, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ip(*arguments: str, check: bool = True) -> None:
    done = subprocess.run(["ip", *arguments], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(arguments)}: {done.stderr.strip()}")
