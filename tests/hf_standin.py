"""A loopback stand-in for the Hugging Face Hub's file endpoint, for testing ``hf://`` sources.

It answers the requests ``huggingface_hub.hf_hub_download`` really makes (point ``HF_ENDPOINT`` at
``url``): ``HEAD`` and ``GET`` on ``/{repo_id}/resolve/{revision}/{filename}``, with the headers
the hub sends for LFS files (``X-Repo-Commit``, ``ETag``/``X-Linked-Etag`` = quoted sha256 of the
content, ``X-Linked-Size``, ``Accept-Ranges``) and ``Range: bytes=N-`` resumes (206). Unknown
repos/files get 404 with ``X-Error-Code``; gated repos get 401 unless the request carries
``Authorization: Bearer <token>``. Every request is recorded in ``requests``.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class Request:
    """One request as the stand-in saw it."""

    method: str
    path: str
    headers: dict[str, str]

    @property
    def range(self) -> str | None:
        return self.headers.get("range")


@dataclass
class HfStandin:
    """Serve ``files`` ({(repo_id, filename): bytes}) on loopback; ``gated`` maps a repo id to the
    token it requires. Hooks: ``drop_after[(repo, file)] = K`` makes the next GET of that file
    close the connection after K body bytes; ``corrupt`` holds files whose body is served with
    flipped bytes while the headers still advertise the true sha256."""

    files: dict[tuple[str, str], bytes]
    gated: dict[str, str] = field(default_factory=dict)
    drop_after: dict[tuple[str, str], int] = field(default_factory=dict)
    corrupt: set[tuple[str, str]] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                standin._answer(self, body=False)

            def do_GET(self) -> None:
                standin._answer(self, body=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def gets(self) -> list[Request]:
        """The GET requests for files (downloads) so far."""
        return [r for r in self.requests if r.method == "GET"]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> HfStandin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- request handling -------------------------------------------------------------------

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, code: int, headers: dict[str, str],
              body: bytes = b"", write_body: bool = True) -> None:
        handler.send_response(code)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if write_body and body:
            handler.wfile.write(body)

    def _error(self, handler: BaseHTTPRequestHandler, code: int, error_code: str | None,
               message: str, write_body: bool) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if error_code:
            headers["X-Error-Code"] = error_code
        if code == 404 and error_code == "EntryNotFound":
            headers["X-Repo-Commit"] = COMMIT
        self._send(handler, code, headers, f'{{"error": "{message}"}}'.encode(), write_body)

    def _answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        path = urlsplit(handler.path).path
        self.requests.append(Request(handler.command, path,
                                     {k.lower(): v for k, v in handler.headers.items()}))
        head, sep, tail = path.lstrip("/").partition("/resolve/")
        revision, _, filename = tail.partition("/")
        repo_id, revision, filename = unquote(head), unquote(revision), unquote(filename)
        if not sep or not filename:
            self._error(handler, 404, None, "Not Found", body)
            return
        repos = {repo for repo, _ in self.files}
        if repo_id not in repos:
            self._error(handler, 404, "RepoNotFound", "Repository not found", body)
            return
        if repo_id in self.gated:
            auth = handler.headers.get("Authorization", "")
            if auth != f"Bearer {self.gated[repo_id]}":
                self._error(handler, 401, "GatedRepo",
                            "Access to model is restricted. You must have access to it and be "
                            "authenticated to access it. Please log in.", body)
                return
        if revision not in {"main", COMMIT}:
            self._error(handler, 404, "RevisionNotFound", "Invalid rev id", body)
            return
        key = (repo_id, filename)
        if key not in self.files:
            self._error(handler, 404, "EntryNotFound", "Entry not found", body)
            return
        data = self.files[key]
        sha = hashlib.sha256(data).hexdigest()
        headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{sha}"', "X-Linked-Etag": f'"{sha}"',
                   "X-Linked-Size": str(len(data)), "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        if not body:
            handler.send_response(200)
            for k, v in headers.items():
                handler.send_header(k, v)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            return
        served = bytes(b ^ 0xFF for b in data) if key in self.corrupt else data
        start, code = 0, 200
        match = RANGE_RE.match(handler.headers.get("Range", ""))
        if match:
            start, code = int(match.group(1)), 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        chunk = served[start:]
        handler.send_response(code)
        for k, v in headers.items():
            handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(chunk)))
        handler.end_headers()
        cut = self.drop_after.pop(key, None)
        if cut is not None:
            handler.wfile.write(chunk[:cut])
            handler.wfile.flush()
            handler.close_connection = True
            return
        handler.wfile.write(chunk)
