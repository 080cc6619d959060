"""llama.cpp RPC workers seen from the server's side: their addresses, what each one says about
itself, and why a launch over them cannot run.

A worker is an ``rpc-server`` (``agent backend worker``) that holds some of the model's layers
for a ``llama-server --rpc host:port,...``. It answers ggml-rpc's own wire protocol
(``ggml/src/ggml-rpc/ggml-rpc.cpp``, b11434): a command byte, a little-endian u64 payload size
and the payload; every reply is a u64 size and the payload. The first command must be HELLO
(its reply carries the worker's protocol version), then DEVICE_COUNT and GET_DEVICE_MEMORY
tell each device's free and total bytes. A worker serves one client at a time, so a worker in
use by another server accepts the connection and then says nothing: the probe gives up after
its timeout and says so.

ggml refuses a worker whose major version differs from its own or whose minor version is
newer (``negotiate_hello``), aborting the server with "RPC handshake failed"; the same rule is
applied here before anything is launched, with the versions named.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from backend.engine.registry import read_engine
from backend.errors import StatedError

"""``rpc-server``'s own default port (``tools/rpc/rpc-server.cpp``)."""
PROBE_TIMEOUT = 5.0
"""Seconds a worker gets to answer each step of the probe (connect, each reply)."""
MIB = 2**20
_CMD_GET_DEVICE_MEMORY = 11
_CMD_HELLO = 14
_CMD_DEVICE_COUNT = 15
_CONN_CAPS = 24
"""``RPC_CONN_CAPS_SIZE``: transport capabilities in HELLO; all zero asks for plain TCP."""
_MAX_DEVICES = 64
"""More devices than any worker has: a larger count is a reply we do not understand."""


class RpcError(StatedError, RuntimeError):
    """A worker cannot serve this launch (unreachable, another protocol, a broken address);
    the message names the worker and what to do."""

    plain = True


@dataclass(frozen=True)
class WorkerDevice:
    """One device a worker offers, in MiB."""

    free_mib: float
    total_mib: float


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker said about itself; ``problem`` is what could not be learned, and why."""

    address: str
    protocol: str | None = None
    """``major.minor.patch`` from its HELLO reply, or None when it did not answer."""
    devices: tuple[WorkerDevice, ...] = ()
    problem: str | None = None
    reachable: bool = True
    """False when nothing listens at the address (connection refused, unknown host)."""

    @property
    def free_mib(self) -> float:
        """Free memory summed over its devices, MiB."""
        return sum(d.free_mib for d in self.devices)

    @property
    def total_mib(self) -> float:
        """Total memory summed over its devices, MiB."""
        return sum(d.total_mib for d in self.devices)


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the worker closed the connection")
        data += chunk
    return data


def _call(sock: socket.socket, cmd: int, payload: bytes, reply_size: int) -> bytes:
    """One request and its reply; raises ``OSError`` (timeouts and closed connections) and
    ``ValueError`` for a reply of another size than the command's."""
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    size = struct.unpack("<Q", _recv_exact(sock, 8))[0]
    if size != reply_size:
        raise ValueError(f"answered command {cmd} with {size} bytes instead of {reply_size}")
    return _recv_exact(sock, size)


def probe(address: str, timeout: float = PROBE_TIMEOUT) -> WorkerInfo:
    """Ask the worker at ``address`` (``host:port``) its protocol version and each device's
    memory. Never raises for the worker's behaviour: what could not be learned is in
    :attr:`WorkerInfo.problem` (``reachable`` False when nothing listens there)."""
    host, port = _split(address)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        return WorkerInfo(address, problem=f"not reachable ({exc.strerror or exc})",
                          reachable=False)
    protocol = None
    devices: list[WorkerDevice] = []
    try:
        with sock:
            hello = _call(sock, _CMD_HELLO, bytes(_CONN_CAPS), 4 + _CONN_CAPS)
            protocol = f"{hello[0]}.{hello[1]}.{hello[2]}"
            count = struct.unpack("<I", _call(sock, _CMD_DEVICE_COUNT, b"", 4))[0]
            if count > _MAX_DEVICES:
                raise ValueError(f"reported {count} devices")
            for device in range(count):
                free, total = struct.unpack("<QQ", _call(sock, _CMD_GET_DEVICE_MEMORY,
                                                         struct.pack("<I", device), 16))
                devices.append(WorkerDevice(free / MIB, total / MIB))
    except TimeoutError:
        what = "its memory" if protocol else "the handshake"
        return WorkerInfo(address, protocol, tuple(devices), problem=(
            f"did not answer {what} within {timeout:g} s: an rpc-server serves one client at a "
            "time, so another llama-server may be using it (or what listens there is not an "
            "rpc-server)"))
    except (OSError, ValueError) as exc:
        step = "memory query" if protocol else "handshake"
        return WorkerInfo(address, protocol, tuple(devices), problem=(
            f"broke off the {step} ({exc}): it may speak an older RPC protocol, or not be "
            "an rpc-server"))
    return WorkerInfo(address, protocol, tuple(devices))


def probe_all(addresses: tuple[str, ...], timeout: float = PROBE_TIMEOUT) -> list[WorkerInfo]:
    """:func:`probe` for each address, in order."""
    return [probe(a, timeout) for a in addresses]


def protocol_refusal(ours: str, theirs: str) -> str | None:
    """Why ggml-rpc would refuse a worker speaking ``theirs`` from a server speaking ``ours``
    (a different major version, or a newer minor one), or None when they agree."""
    mine, other = ours.split("."), theirs.split(".")
    if mine[0] == other[0] and int(other[1]) <= int(mine[1]):
        return None
    return (f"speaks RPC protocol {theirs} and this engine speaks {ours}: the worker and the "
            "server were built from different llama.cpp versions; run the same engine on both "
            "(`agent backend build` of the same dflash-agent, or the same --ref/--source)")


def check_workers(infos: list[WorkerInfo], protocol: str | None) -> list[str]:
    """Refuse workers the launch cannot use; returns notes on what could not be learned.

    ``protocol``: the server engine's RPC protocol version (None: unknown, e.g. a system
    binary; then only the worker's own answers are checked). Raises :class:`RpcError` for the
    first worker that is not reachable, does not answer the handshake (busy: llama-server
    would wait on it until its start timeout) or speaks another protocol.
    """
    notes = []
    for info in infos:
        if not info.reachable:
            raise RpcError(f"RPC worker {info.address} is {info.problem}; start it there with "
                           "`agent backend worker --host ADDRESS --port PORT`, or leave it out "
                           "(--rpc, or the preset's rpc)")
        if info.protocol is None:
            raise RpcError(f"RPC worker {info.address} {info.problem}; stop the server using "
                           "it (`agent backend down` there) or start another worker")
        if info.protocol and protocol and (why := protocol_refusal(protocol, info.protocol)):
            raise RpcError(f"RPC worker {info.address} {why}")
        if info.problem:
            notes.append(f"RPC worker {info.address} {info.problem}")
    return notes


def gone_workers(addresses: tuple[str, ...], timeout: float = 2.0) -> list[str]:
    """The workers of ``addresses`` nothing listens at any more (connection refused): after a
    server died of a broken RPC connection, these are the ones that went away."""
    gone = []
    for address in addresses:
        try:
            socket.create_connection(_split(address), timeout=timeout).close()
        except TimeoutError:
            continue  # still there, only slow or busy
        except OSError:
            gone.append(address)
    return gone


def engine_protocol(binary: Path) -> str | None:
    """The RPC protocol of the managed engine ``binary`` belongs to (its ``engine.json``), or
    None for a binary the product did not build or an engine built without RPC."""
    try:
        return read_engine(binary.parent.parent / "engine.json").rpc_protocol
    except (OSError, ValueError):
        return None


_LOST = ("Remote RPC server crashed", "Failed to connect to", "RPC handshake failed")
"""What ggml-rpc aborts with when a worker is gone, never answered, or refused the handshake."""


def lost_worker_cause(addresses: tuple[str, ...], log_text: str) -> str | None:
    """When a server over ``addresses`` died of a broken RPC connection (its log has ggml-rpc's
    abort message): one line naming the worker(s) that went away and what to do; else None."""
    if not addresses or not any(needle in log_text for needle in _LOST):
        return None
    gone = gone_workers(addresses)
    if not gone:
        return (f"llama-server lost the connection to an RPC worker ({', '.join(addresses)}: "
                "all listen again, so one restarted or the network broke); start the server "
                "again (`agent backend up --rpc ...`)")
    names = ", ".join(gone)
    return (f"llama-server lost its RPC worker {names} (nothing listens there any more: the "
            f"worker stopped or its machine went away); start the worker again (`agent backend "
            f"worker` on that machine), then the server (`agent backend up --rpc "
            f"{','.join(addresses)}`)")
