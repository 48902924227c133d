"""The README, tried as a new user would (run by scripts/test.sh after the tests):

- its first ```sh block holds exactly two commands, and the second is what .ci/run runs;
- the first command, run as written from the repository root, serves: /healthcheck answers 200
  and every ```console block's `$ ` commands print what the README shows against it (numbers after
  "reset in"/"resets in" may differ; a `...` line ends what is compared). Each block gets a freshly
  started server, so one block's hits do not leak into the next;
- the Python script headed `# try.py` is saved as try.py for the block that runs it.

    .tools/venv/bin/python scripts/check_readme.py
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The first serve builds sluice in release mode: minutes on a cold cache.
FIRST_START_TIMEOUT = 1200
START_TIMEOUT = 120
COMMAND_TIMEOUT = 900


def fail(msg):
    print(f"scripts/check_readme.py: {msg}", file=sys.stderr)
    sys.exit(1)


def blocks(text):
    """(info string, lines) of every fenced block."""
    out, info, lines = [], None, []
    for line in text.splitlines():
        if line.startswith("```"):
            if info is None:
                info, lines = line[3:].strip(), []
            else:
                out.append((info, lines))
                info = None
        elif info is not None:
            lines.append(line)
    return out


def normalize(line):
    line = re.sub(r"(resets? in) [0-9.]+( ?m?s)", r"\1 N\2", line.rstrip())
    return line


class Server:
    """The README's serve command, run by the shell as written, in its own process group."""

    def __init__(self, command, timeout):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            command, shell=True, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                self.log.seek(0)
                fail(f"`{command}` exited ({self.proc.returncode}):\n"
                     + self.log.read().decode(errors="replace")[-4000:])
            try:
                with urllib.request.urlopen("http://127.0.0.1:8080/healthcheck", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                fail(f"`{command}` did not answer /healthcheck within {timeout}s")
            time.sleep(0.5)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def sessions(lines):
    """[(command, expected lines)] of a console block."""
    out = []
    for line in lines:
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


def main():
    readme = open(os.path.join(ROOT, "README.md")).read()
    all_blocks = blocks(readme)
    first = next((lines for info, lines in all_blocks if info == "sh"), None)
    if first is None:
        fail("README.md has no ```sh block")
    commands = [l for l in first if l.strip() and not l.lstrip().startswith("#")]
    if len(commands) != 2:
        fail(f"the README's first block should hold exactly two commands, not {commands}")
    serve, test = commands
    ci = open(os.path.join(ROOT, ".ci/run")).read()
    if not any(l.strip() == test.strip() for l in ci.splitlines()):
        fail(f".ci/run does not run the README's test command `{test}`")
    print(f"ok: .ci/run runs `{test}`")

    scripts = {}
    for info, lines in all_blocks:
        if info == "python" and lines and lines[0].startswith("# ") and lines[0][2:].endswith(".py"):
            scripts[lines[0][2:].strip()] = "\n".join(lines) + "\n"

    consoles = [sessions(lines) for info, lines in all_blocks if info == "console"]
    if not consoles:
        fail("README.md has no ```console block to try")
    written = []
    timeout = FIRST_START_TIMEOUT
    try:
        for block in consoles:
            server = Server(serve, timeout)
            timeout = START_TIMEOUT
            try:
                for command, expected in block:
                    for name, body in scripts.items():
                        if re.search(rf"(^|\s){re.escape(name)}(\s|$)", command):
                            path = os.path.join(ROOT, name)
                            with open(path, "w") as f:
                                f.write(body)
                            written.append(path)
                    run = subprocess.run(command, shell=True, cwd=ROOT, capture_output=True,
                                         text=True, timeout=COMMAND_TIMEOUT)
                    if run.returncode != 0:
                        fail(f"`{command}` exited {run.returncode}:\n{run.stderr[-4000:]}")
                    got = [normalize(l) for l in run.stdout.splitlines()]
                    want = [normalize(l) for l in expected]
                    if "..." in want:
                        want = want[:want.index("...")]
                        got = got[:len(want)]
                    if got != want:
                        fail(f"`{command}` printed\n" + "\n".join(got)
                             + "\nbut the README shows\n" + "\n".join(want))
                    print(f"ok: `{command}`")
            finally:
                server.stop()
    finally:
        for path in written:
            os.remove(path)
    print(f"ok: `{serve}` serves, and the README's {sum(map(len, consoles))} console commands print what it shows")


if __name__ == "__main__":
    main()
