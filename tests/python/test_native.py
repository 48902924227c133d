"""The native API (sluice.v1) from Python and from the README, against the real binary:

* README.md's Python snippet ("Direct clients (sluice.v1)"), run as printed there (only its
  `ADDR` line is pointed at the test's server);
* README.md's grpcurl commands: grpcurl itself cannot be installed from our package
  registries, so each command's JSON body and method are sent the way grpcurl sends them,
  through the server's reflection (grpcio-reflection) and protobuf's json_format, and `list`
  is answered from reflection;
* examples/native_client.rs (the Rust client's guard), run against the same server.

Needs grpcio-reflection besides the packages test_rls.py needs (scripts/test.sh installs it).
"""

import re
import shlex
import subprocess

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from test_rls import ROOT, Server, binary  # noqa: F401 (binary is a fixture)

LLM = (ROOT / "config" / "llm.yaml").read_text()
SECTION = "## Direct clients (sluice.v1)"


def section():
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return text[start:end]


def blocks(lang):
    return re.findall(r"```" + lang + r"\n(.*?)```", section(), re.S)


def test_readme_python_snippet(binary, tmp_path, capsys):
    (code,) = [b for b in blocks("python") if "sluice.v1.RateLimiter" in b]
    s = Server(binary, tmp_path, config_text=LLM)
    try:
        assert 'ADDR = "127.0.0.1:8081"' in code
        code = code.replace('ADDR = "127.0.0.1:8081"', f'ADDR = "{s.grpc_addr}"')
        exec(compile(code, "README.md", "exec"), {})
        out = capsys.readouterr().out
        assert "reserved True 98000" in out, out
        assert 'RateLimit "tokens_per_tenant";r=98000;t=' in out, out
        assert "left 98766" in out, out
    finally:
        s.stop()


class Reflected:
    """What grpcurl does with `-d JSON ADDR service/Method`, through server reflection."""

    def __init__(self, addr):
        self.channel = grpc.insecure_channel(addr)
        self.db = ProtoReflectionDescriptorDatabase(self.channel)
        self.pool = descriptor_pool.DescriptorPool(self.db)

    def call(self, full_method, body):
        service, method = full_method.rsplit("/", 1)
        m = self.pool.FindServiceByName(service).FindMethodByName(method)
        request = json_format.Parse(body, message_factory.GetMessageClass(m.input_type)())
        response = message_factory.GetMessageClass(m.output_type)
        rpc = self.channel.unary_unary(
            f"/{service}/{method}",
            request_serializer=lambda r: r.SerializeToString(),
            response_deserializer=response.FromString,
        )
        return json_format.MessageToDict(rpc(request, timeout=10))


def grpcurl_commands():
    """Each `grpcurl ...` command of the section's sh blocks (continuations joined)."""
    commands = []
    for block in blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            # `ID=$(grpcurl ... | python3 -c ...)`: the grpcurl command inside.
            inner = re.match(r"^ID=\$\((grpcurl .*?) \| ", line)
            if inner:
                line = inner.group(1)
            if line.startswith("grpcurl "):
                commands.append(shlex.split(line, comments=True))
    return commands


def test_readme_grpcurl_commands(binary, tmp_path):
    commands = grpcurl_commands()
    methods = [c[-1] for c in commands]
    assert methods == [
        "list",
        "sluice.v1.RateLimiter/Check",
        "sluice.v1.RateLimiter/Check",
        "sluice.v1.RateLimiter/Reserve",
        "sluice.v1.RateLimiter/Commit",
        "sluice.v1.RateLimiter/Reserve",
        "sluice.v1.RateLimiter/Cancel",
    ], methods
    s = Server(binary, tmp_path, config_text=LLM)
    try:
        r = Reflected(s.grpc_addr)
        answers = []
        reservation = None
        for c in commands:
            assert c[:2] == ["grpcurl", "-plaintext"], c
            if c[-1] == "list":
                assert c[-2] == "127.0.0.1:8081", c
                assert "sluice.v1.RateLimiter" in r.db.get_services()
                continue
            assert c[-2] == "127.0.0.1:8081" and c[2] == "-d", c
            body = c[3]
            if "$ID" in body:
                body = body.replace("$ID", reservation)
            a = r.call(c[-1], body)
            answers.append((c[-1].rsplit("/", 1)[1], a))
            if "reservationId" in a:
                reservation = a["reservationId"]
        # The answers the README describes (uint64 fields are JSON strings).
        (_, check), (_, dry), (_, held), (_, _), (_, held2), (_, _) = answers
        assert check["allowed"] and check["statuses"][0]["remaining"] == "99999", check
        assert check["statuses"][0]["limit"] == {
            "name": "tokens_per_tenant", "requests": "100000", "window": "3600s",
            "algorithm": "fixed_window",
        }, check
        assert "RateLimit-Policy" in check["headers"], check
        assert dry["allowed"] and dry["statuses"][0]["remaining"] == "94999", dry
        assert held["allowed"] and held["statuses"][0]["remaining"] == "97999", held
        # 128 random bits in hex, then the Redis Cluster slot tag of its first counter.
        assert re.fullmatch(r"[0-9a-f]{32}(\.[0-9a-f]{1,8})?", held["reservationId"]), held
        assert held2["allowed"] and held2["statuses"][0]["remaining"] == "96765", held2
        look = r.call("sluice.v1.RateLimiter/Check",
                      '{"domain": "llm", "descriptors": [{"entries": '
                      '[{"key": "tenant", "value": "acme"}], "hits": 0}]}')
        assert look["statuses"][0]["remaining"] == "98765", look
    finally:
        s.stop()


def test_rust_example_native_client(binary, tmp_path):
    subprocess.run(["cargo", "build", "--quiet", "--example", "native_client"], cwd=ROOT,
                   check=True)
    example = ROOT / "target" / "debug" / "examples" / "native_client"
    s = Server(binary, tmp_path, config_text=LLM)
    try:
        run = lambda *a: subprocess.run(  # noqa: E731
            [str(example), "--addr", f"http://{s.grpc_addr}", *a],
            capture_output=True, text=True, timeout=60,
        )
        out = run("llm", "tenant=acme", "2000", "1234")
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [
            "reserved    2000 for [tenant=acme]: remaining 98000 of 100000 per 3600s "
            "(tokens_per_tenant)",
            "committed   1234",
            "now         remaining 98766",
        ], out.stdout
        out = run("--cancel", "llm", "tenant=acme", "5000", "0")
        assert out.stdout.splitlines()[-2:] == ["cancelled", "now         remaining 98766"]
        out = run("llm", "tenant=acme", "200000", "0")
        assert out.returncode == 2 and out.stdout.startswith("rejected"), out
    finally:
        s.stop()
