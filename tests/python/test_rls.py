"""Black-box check of sluice with an independent client: Envoy's own generated Python types
(`xds-protos`) over `grpcio`, against the real binary.

Setup (once):   python3 -m venv .tools/venv
                .tools/venv/bin/pip install pytest grpcio xds-protos grpcio-reflection
Run:            .tools/venv/bin/python -m pytest tests/python
                (or `python3 -m pytest tests/python` with those packages installed)

The binary: the session fixture runs `cargo build --bin sluice` first (a no-op when it is up to
date) and starts `target/debug/sluice`; set SLUICE_BIN to use another binary without building.
Each server listens on free ports of 127.0.0.1 (it binds port 0 and reports the ports in its
JSON log) and is stopped with SIGTERM, which must exit 0.
"""

import json
import os
import queue
import signal
import subprocess
import threading
import urllib.request
from pathlib import Path

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
domain: py
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per_user}
  - key: path
    value: "/api/*"
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: internal
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
"""

OK = rls_pb2.RateLimitResponse.OK
OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT
MINUTE = rls_pb2.RateLimitResponse.RateLimit.MINUTE


@pytest.fixture(scope="session")
def binary():
    if os.environ.get("SLUICE_BIN"):
        return os.environ["SLUICE_BIN"]
    subprocess.run(["cargo", "build", "--quiet", "--bin", "sluice"], cwd=ROOT, check=True)
    path = ROOT / "target" / "debug" / "sluice"
    assert path.exists(), path
    return str(path)


class Server:
    def __init__(self, binary, config_dir, flags=(), config_text=CONFIG):
        config = Path(config_dir) / "config.yaml"
        config.write_text(config_text)
        self.proc = subprocess.Popen(
            [binary, "serve", "--config", str(config),
             "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
             "--log-format", "json", *flags],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True,
        )
        self.log = []
        addrs = queue.Queue()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                try:
                    fields = json.loads(line).get("fields", {})
                except ValueError:
                    continue
                if fields.get("message") == "sluice serving":
                    addrs.put((fields["grpc"], fields["http"]))

        threading.Thread(target=read, daemon=True).start()
        try:
            self.grpc_addr, self.http_addr = addrs.get(timeout=60)
        except queue.Empty:
            self.proc.kill()
            raise AssertionError("sluice did not start: " + "".join(self.log))
        self.channel = grpc.insecure_channel(self.grpc_addr)
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)

    def stop(self):
        self.channel.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        assert code == 0, "".join(self.log)


@pytest.fixture
def server(binary, tmp_path):
    s = Server(binary, tmp_path)
    yield s
    s.stop()


def descriptor(*entries, hits_addend=None):
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
    )
    if hits_addend is not None:
        d.hits_addend.value = hits_addend
    return d


def ask(server, *descriptors, domain="py", hits_addend=0):
    request = rls_pb2.RateLimitRequest(
        domain=domain, descriptors=list(descriptors), hits_addend=hits_addend
    )
    return server.stub.ShouldRateLimit(request, timeout=10)


def test_healthcheck(server):
    with urllib.request.urlopen(f"http://{server.http_addr}/healthcheck", timeout=10) as r:
        assert r.status == 200


def test_ok_then_over_limit_with_remaining(server):
    for remaining in (2, 1, 0):
        r = ask(server, descriptor(("user", "alice")))
        assert r.overall_code == OK
        (s,) = r.statuses
        assert s.code == OK
        assert s.current_limit.requests_per_unit == 3
        assert s.current_limit.unit == MINUTE
        assert s.current_limit.name == "per_user"
        assert s.limit_remaining == remaining
        assert 0 < s.duration_until_reset.ToMilliseconds() <= 60_000
    r = ask(server, descriptor(("user", "alice")))
    assert r.overall_code == OVER_LIMIT
    assert r.statuses[0].code == OVER_LIMIT
    assert r.statuses[0].limit_remaining == 0
    # Another value of the same key has its own counter.
    assert ask(server, descriptor(("user", "bob"))).statuses[0].limit_remaining == 2


def test_hits_addend(server):
    r = ask(server, descriptor(("path", "/api/x")), hits_addend=10)
    assert r.statuses[0].limit_remaining == 90
    r = ask(server, descriptor(("path", "/api/x"), hits_addend=0), hits_addend=10)
    assert r.statuses[0].limit_remaining == 90, "hits_addend 0 on the descriptor only checks"


def test_unlimited_and_blocked(server):
    r = ask(server, descriptor(("internal", "x")))
    assert r.overall_code == OK
    (s,) = r.statuses
    assert s.code == OK
    assert not s.HasField("current_limit")
    assert s.limit_remaining == 4294967295
    assert not s.HasField("duration_until_reset")

    r = ask(server, descriptor(("internal", "x")), descriptor(("blocked", "y")))
    assert r.overall_code == OVER_LIMIT
    assert [s.code for s in r.statuses] == [OK, OVER_LIMIT]


def test_no_matching_rule_and_unknown_domain(server):
    for domain, entry in (("py", ("nothing", "x")), ("other", ("user", "alice"))):
        r = ask(server, descriptor(entry), domain=domain)
        assert r.overall_code == OK
        (s,) = r.statuses
        assert not s.HasField("current_limit")
        assert s.limit_remaining == 0


def test_invalid_argument(server):
    with pytest.raises(grpc.RpcError) as e:
        ask(server, descriptor(("user", "alice")), domain="")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == "rate limit domain must not be empty"
    with pytest.raises(grpc.RpcError) as e:
        ask(server)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_response_headers(binary, tmp_path):
    s = Server(binary, tmp_path, ["--response-headers"])
    try:
        r = ask(s, descriptor(("user", "carol")), descriptor(("path", "/api/y")))
        headers = {h.key: h.value for h in r.response_headers_to_add}
        assert headers["RateLimit-Limit"] == "3"
        assert headers["RateLimit-Remaining"] == "2"
        assert 1 <= int(headers["RateLimit-Reset"]) <= 60
    finally:
        s.stop()


def readme_partition_key():
    """The `pk` function of README.md's "IETF headers" section, run as printed there."""
    text = (ROOT / "README.md").read_text()
    start = text.index("```python\nimport base64, hashlib\ndef pk(")
    code = text[start + len("```python\n") : text.index("```", start + 3)]
    scope = {}
    exec(code, scope)  # also runs the snippet's own assert
    return scope["pk"]


def test_ietf_response_headers(binary, tmp_path):
    pk = readme_partition_key()
    s = Server(binary, tmp_path, ["--response-headers-format", "ietf"])
    try:
        r = ask(
            s,
            descriptor(("user", "carol")),
            descriptor(("path", "/api/y")),
            descriptor(("internal", "x")),
        )
        headers = [(h.key, h.value) for h in r.response_headers_to_add]
        assert [k for k, _ in headers] == ["RateLimit-Policy", "RateLimit"], headers
        policy, limit = headers[0][1], headers[1][1]
        carol, path = pk(b"carol"), pk(b"/api/y")
        # The rule's name, else its full key; the unlimited descriptor has no item.
        assert policy == (
            f'"per_user";q=3;w=60;pk=:{carol}:, "py.path_/api/*";q=100;w=3600;pk=:{path}:'
        )
        items = limit.split(", ")
        assert items[0].startswith('"per_user";r=2;t=') and items[0].endswith(f";pk=:{carol}:")
        assert items[1].startswith('"py.path_/api/*";r=99;t=')
        assert 1 <= int(items[0].split(";")[2][2:]) <= 60
    finally:
        s.stop()
