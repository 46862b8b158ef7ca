"""A small GitHub REST server on 127.0.0.1 for tests: the endpoints PyGithub calls to post a PR comment.

Served under ``/api/v3`` like GitHub Enterprise (GraphQL at ``/api/graphql``), so a client only works if it honours
the API URL it is given. Tokens map to a login and a write permission (a read-only token answers 403 on writes, like
a fork PR's GITHUB_TOKEN). An app installation's token (GITHUB_TOKEN, a GitHub App's) answers 403 on GET /user and
is named by GraphQL's ``viewer`` by its slug, while its comments are by ``<slug>[bot]``. Failures can be scripted
per request, including a write GitHub stores only seconds after answering it; every request is recorded.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PREFIX = "/api/v3"


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Failure:
    method: str
    pattern: str
    status: int
    message: str
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1
    store_anyway: bool = False  # handle the request, then answer the failure (a write GitHub stored before a 502)
    store_after: float | None = None  # answer the failure now, handle the request this many seconds later


@dataclass
class Identity:
    login: str
    can_write: bool = True
    has_user_endpoint: bool = True  # False for GITHUB_TOKEN: GET /user is "Resource not accessible by integration"
    has_viewer: bool = True  # False: GraphQL viewer refused too


class FakeGitHub:
    def __init__(self, repository: str = "acme/transformers", pr_number: int = 7, head_sha: str = "a" * 40):
        self.repository = repository
        self.pr_number = pr_number
        self.head_sha = head_sha
        self.identities: dict[str, Identity] = {}
        self.comments: list[dict[str, Any]] = []
        self.requests: list[Recorded] = []
        self.failures: list[Failure] = []
        self._next_id = 1000
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def api_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{PREFIX}"

    def __enter__(self) -> FakeGitHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def add_token(
        self, token: str, login: str, *, can_write: bool = True, has_user_endpoint: bool = True, has_viewer: bool = True
    ) -> None:
        self.identities[token] = Identity(login, can_write, has_user_endpoint, has_viewer)

    def fail(
        self,
        method: str,
        pattern: str,
        status: int,
        message: str,
        times: int = 1,
        store_anyway: bool = False,
        store_after: float | None = None,
        **headers: str,
    ) -> None:
        """Answer the next ``times`` requests matching ``method`` and the path regex with ``status``."""
        failure = Failure(method, pattern, status, message, dict(headers), times, store_anyway, store_after)
        self.failures.append(failure)

    def add_comment(self, login: str, body: str) -> dict[str, Any]:
        with self._lock:
            return self._store_comment(login, body)

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in ("POST", "PATCH")]

    # ── JSON the way GitHub shapes it (only the fields PyGithub reads) ──
    def _repo_json(self) -> dict[str, Any]:
        owner, name = self.repository.split("/")
        return {
            "id": 1,
            "name": name,
            "full_name": self.repository,
            "owner": {"login": owner, "id": 2, "type": "Organization"},
            "url": f"{self.api_url}/repos/{self.repository}",
            "html_url": f"https://github.example/{self.repository}",
            "private": False,
        }

    def _pull_json(self) -> dict[str, Any]:
        base = f"{self.api_url}/repos/{self.repository}"
        return {
            "id": 3,
            "number": self.pr_number,
            "state": "open",
            "url": f"{base}/pulls/{self.pr_number}",
            "issue_url": f"{base}/issues/{self.pr_number}",
            "html_url": f"https://github.example/{self.repository}/pull/{self.pr_number}",
            "head": {"sha": self.head_sha, "ref": "feature", "repo": self._repo_json()},
            "base": {"sha": "b" * 40, "ref": "main", "repo": self._repo_json()},
        }

    def _issue_json(self) -> dict[str, Any]:
        return {
            "id": 4,
            "number": self.pr_number,
            "state": "open",
            "title": "hfexport: exports on main",
            "url": f"{self.api_url}/repos/{self.repository}/issues/{self.pr_number}",
            "html_url": f"https://github.example/{self.repository}/issues/{self.pr_number}",
        }

    def _store_comment(self, login: str, body: str) -> dict[str, Any]:
        self._next_id += 1
        comment = {
            "id": self._next_id,
            "body": body,
            "user": {"login": login, "id": 9, "type": "Bot" if login.endswith("[bot]") else "User"},
            "url": f"{self.api_url}/repos/{self.repository}/issues/comments/{self._next_id}",
            "html_url": f"https://github.example/{self.repository}/pull/{self.pr_number}#issuecomment-{self._next_id}",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
        self.comments.append(comment)
        return comment

    # ── request handling ──
    def _scripted_failure(self, method: str, path: str) -> Failure | None:
        for failure in self.failures:
            if failure.times > 0 and failure.method == method and re.search(failure.pattern, path):
                failure.times -= 1
                return failure
        return None

    def _route(self, method: str, path: str, identity: Identity, body: Any) -> tuple[int, Any]:
        repo = f"{PREFIX}/repos/{self.repository}"
        issue_comments = f"{repo}/issues/{self.pr_number}/comments"
        if method == "GET" and path == f"{PREFIX}/user":
            if not identity.has_user_endpoint:
                return 403, {"message": "Resource not accessible by integration"}
            return 200, {"login": identity.login, "id": 9, "type": "User"}
        if method == "POST" and path == "/api/graphql":
            return 200, self._graphql(identity, body)
        if method == "GET" and path == repo:
            return 200, self._repo_json()
        if method == "GET" and path == f"{repo}/pulls/{self.pr_number}":
            return 200, self._pull_json()
        if method == "GET" and path == issue_comments:
            return 200, self.comments
        if method == "GET" and path == f"{repo}/issues/{self.pr_number}":  # PR number N is also a tracking issue N
            return 200, self._issue_json()
        if method in ("POST", "PATCH") and not identity.can_write:
            return 403, {"message": "Resource not accessible by integration"}
        if method == "POST" and path == issue_comments:
            return 201, self._store_comment(identity.login, body["body"])
        match = re.fullmatch(rf"{re.escape(repo)}/issues/comments/(\d+)", path)
        if method == "PATCH" and match:
            for comment in self.comments:
                if comment["id"] == int(match.group(1)):
                    if comment["user"]["login"] != identity.login:
                        return 403, {"message": "Must have admin rights to Repository."}
                    comment["body"] = body["body"]
                    comment["updated_at"] = "2026-01-02T00:00:00Z"
                    return 200, comment
        return 404, {"message": "Not Found"}

    @staticmethod
    def _graphql(identity: Identity, body: Any) -> dict[str, Any]:
        if "viewer" not in str((body or {}).get("query")):
            return {"errors": [{"type": "INTERNAL", "message": "this fake answers only viewer"}]}
        if not identity.has_viewer:
            return {
                "data": None,
                "errors": [{"type": "FORBIDDEN", "message": "Resource not accessible by integration"}],
            }
        return {"data": {"viewer": {"login": identity.login.removesuffix("[bot]")}}}

    def _later(self, delay: float, method: str, path: str, identity: Identity, body: Any) -> None:
        def store() -> None:
            with self._lock:
                self._route(method, path, identity, body)

        timer = threading.Timer(delay, store)
        timer.daemon = True
        timer.start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _answer(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                path = self.path.split("?")[0]
                with fake._lock:
                    fake.requests.append(Recorded(self.command, path, dict(self.headers), body))
                    failure = fake._scripted_failure(self.command, path)
                    scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
                    identity = fake.identities.get(token)
                    stored = failure is not None and (failure.store_anyway or failure.store_after is not None)
                    if failure is not None and not stored:
                        return self._answer(failure.status, {"message": failure.message}, failure.headers)
                    if scheme.lower() not in ("token", "bearer") or identity is None:
                        return self._answer(401, {"message": "Bad credentials"})
                    if failure is not None and failure.store_after is not None:
                        fake._later(failure.store_after, self.command, path, identity, body)
                        return self._answer(failure.status, {"message": failure.message}, failure.headers)
                    status, payload = fake._route(self.command, path, identity, body)
                if failure is not None:
                    return self._answer(failure.status, {"message": failure.message}, failure.headers)
                self._answer(status, payload)

            do_GET = do_POST = do_PATCH = _handle

        return Handler
