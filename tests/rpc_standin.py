"""A scripted RPC worker on loopback for what a real one cannot be made to do on demand:
speak another protocol version (an engine of another llama.cpp build), say nothing (busy with
another server), or hang up at the handshake. It answers ggml-rpc's wire format as b11434's
``rpc-server`` does (``ggml/src/ggml-rpc/ggml-rpc.cpp``): command byte, u64 size, payload."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Literal

Mode = Literal["answer", "silent", "hang-up"]


class StandinWorker:
    """``with StandinWorker(version=(4, 0, 0)) as w: w.address``: a worker that answers HELLO
    with ``version`` and one device of ``free``/``total`` bytes (mode ``answer``), accepts and
    never answers (``silent``), or closes every connection at once (``hang-up``)."""

    def __init__(self, mode: Mode = "answer", version: tuple[int, int, int] = (7, 0, 0),
                 free: int = 3 * 2**30, total: int = 4 * 2**30):
        self.mode, self.version, self.free, self.total = mode, version, free, total
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> StandinWorker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()
        for conn in self._open:
            conn.close()

    def _serve(self) -> None:
        # accept() is not woken by a close from another thread: poll, so the port is closed
        # (and refuses connections) as soon as the block ends.
        self._sock.settimeout(0.05)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            if self.mode == "hang-up":
                conn.close()
            elif self.mode == "silent":
                self._open.append(conn)
            else:
                with conn:
                    self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        replies = {14: bytes(self.version) + bytes(1 + 24),
                   15: struct.pack("<I", 1),
                   11: struct.pack("<QQ", self.free, self.total)}
        try:
            while True:
                head = conn.recv(9, socket.MSG_WAITALL)
                if len(head) < 9:
                    return
                cmd, size = struct.unpack("<BQ", head)
                if size:
                    conn.recv(size, socket.MSG_WAITALL)
                reply = replies.get(cmd)
                if reply is None:
                    return
                conn.sendall(struct.pack("<Q", len(reply)) + reply)
        except OSError:
            return
