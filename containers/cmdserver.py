"""Command server: the main process of every sandbox container (run as root by the sandbox).

The host sends requests on stdin and reads responses on stdout, one JSON object per line, ASCII
only (binary payloads are base64): no byte of a request can be taken for Docker's attach detach
keys (ctrl-p ctrl-q), and output of any kind cannot break the framing. One request at a time.
Operations:

- ``ping`` -> ``{}`` (readiness).
- ``exec`` {cmd, user, cwd, env, timeout, cap} -> {exit, signal, timed_out, oom, seconds, out, err}:
  runs ``bash -c cmd`` as ``user`` in its own process group with stdin from /dev/null; at the
  timeout, and in any case once bash exits, the whole group is killed. Each stream keeps its first
  and last ``cap // 2`` bytes ({head, tail, total}).
- ``write`` {path, data, mode, user, as_user} / ``read`` {path, as_user} -> {data}: one file. Without
  ``as_user`` the server does it as root and the written file is chowned to ``user``; with
  ``as_user`` (an account name) a child process does it as that account, with no supplementary
  groups and no capabilities, so the kernel refuses what that user's own commands could not do
  (only regular files; ``PermissionError`` answers the rest). A root ``read`` takes only a regular
  file that is not a link (a FIFO or a link planted where root reads answers ``OSError`` at once).
- ``put_tar`` {dest, data, user} / ``get_tar`` {path, caps} -> {data, left_out}: a tar extracted
  into ``dest`` (owners as in the tar, or ``user`` when given) / a tar of ``path`` whose top entry
  is its base name (like ``docker cp``), read within ``caps`` (entries, tar bytes, bytes of one
  file, depth, path length, names left out); ``left_out`` counts and names what the caps kept out.
- ``read`` also takes ``max_bytes``: a larger file answers ``FileTooLargeError``.

A failing request answers {error: exception class name, message}. The sandbox passes the source
of ``cmdserver_files.py`` (the file operations) followed by this file's to ``python3 -I -S -c``, so
images need no copy of either and always run the current version.
"""

import base64
import json
import os
import selectors
import shlex
import signal
import subprocess
import sys
import time

if "FILE_OPS" not in globals():  # imported on its own (to read or test it): the other half is a sibling
    from sparring.containers.cmdserver_files import FILE_OPS, account

#: After bash exits (or is killed), how long to wait for pipes still held by escaped processes.
DRAIN_GRACE_S = 0.2
#: Commands of this user start in a shell that is already running (see Standby).
STANDBY_USER = "sparring"
OOM_COUNTERS = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")


def write_line(obj):
    view = memoryview(json.dumps(obj).encode() + b"\n")
    while view:
        view = view[os.write(1, view) :]


def oom_kills():
    """The memory cgroup's OOM-kill counter (0 where the kernel does not expose it)."""
    for path in OOM_COUNTERS:
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except OSError:
            continue
    return 0


class Capture:
    """Keeps the first and last ``cap // 2`` bytes of a stream and counts the rest."""

    def __init__(self, cap):
        self.head_cap = cap // 2
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data):
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.tail_cap + 65536:
                del self.tail[: len(self.tail) - self.tail_cap]

    def result(self):
        tail = bytes(self.tail[-self.tail_cap :]) if self.tail_cap else b""
        return {
            "head": base64.b64encode(bytes(self.head)).decode(),
            "tail": base64.b64encode(tail).decode(),
            "total": self.total,
        }


def kill_group(proc):
    """SIGKILL bash's process group until it is empty (a fork bomb may race the first kill).

    Reaps bash itself on the way, since a zombie leader keeps the group alive; orphans are reaped
    by the container's init.
    """
    for attempt in range(400):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        if proc.poll() is None or attempt:
            time.sleep(0.002)


def failed(code, message, cap, started):
    """The answer for a command that could not be started."""
    err = Capture(cap)
    err.add(message.encode() + b"\n")
    return {"exit": code, "signal": None, "timed_out": False, "oom": False, "seconds": time.monotonic() - started,
            "out": Capture(cap).result(), "err": err.result()}  # fmt: skip


def user_env(user, home, extra=None):
    env = dict(os.environ)
    env.update({"HOME": home, "USER": user, "LOGNAME": user})
    env.update(extra or {})
    return env


def spawn(argv, user, cwd, env, pass_fds=()):
    uid, gid, _ = account(user)
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=env,
        start_new_session=True, user=uid, group=gid, extra_groups=[], close_fds=True, pass_fds=pass_fds,
    )  # fmt: skip


class Standby:
    """A bash already started as the sandbox user, waiting to read its command from a pipe.

    Starting bash is most of the cost of a short command, so the server starts the next one right
    after answering (while the host reads the answer) and hands it the next command of that user:
    the shell sources the pipe, which holds ``cd DIR; export VARS; COMMAND``.
    """

    def __init__(self):
        self.proc = None
        self.feed = None

    def prepare(self):
        if self.proc is not None and self.proc.poll() is None:
            return
        self.discard()
        try:
            uid, gid, home = account(STANDBY_USER)
            read_end, self.feed = os.pipe()
            try:
                os.fchown(read_end, uid, gid)  # the shell re-opens it through /dev/fd
                argv = ["/bin/bash", "-c", f". /dev/fd/{read_end}"]
                self.proc = spawn(argv, STANDBY_USER, "/", user_env(STANDBY_USER, home), (read_end,))
            finally:
                os.close(read_end)
        except (KeyError, OSError):  # no such user in this image, or no process left: start on demand
            self.discard()

    def take(self, req):
        """The waiting shell, now running ``req``'s command; None where it cannot serve it."""
        env = req.get("env") or {}
        if self.proc is None or req["user"] != STANDBY_USER or not all(k.isidentifier() for k in env):
            return None
        if self.proc.poll() is not None:  # killed meanwhile by a process the agent left behind
            self.discard()
            return None
        exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in env.items())
        script = f"cd -- {shlex.quote(req['cwd'])} || exit 126; {exports}{req['cmd']}\n".encode()
        proc, feed = self.proc, self.feed
        self.proc = self.feed = None
        try:
            view = memoryview(script)
            while view:
                view = view[os.write(feed, view) :]
        except OSError:
            proc.kill()
            proc.wait()
            return None
        finally:
            os.close(feed)
        return proc

    def discard(self):
        if self.feed is not None:
            os.close(self.feed)
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc.stdout.close()
            self.proc.stderr.close()
        self.proc = self.feed = None


STANDBY = Standby()


def op_exec(req):
    started = time.monotonic()
    cwd = req["cwd"]
    if not os.path.isdir(cwd):
        return failed(126, f"sparring: working directory {cwd} does not exist", req["cap"], started)
    ooms = oom_kills()
    proc = STANDBY.take(req)
    if proc is None:
        try:
            home = account(req["user"])[2]
            proc = spawn(["/bin/bash", "-c", req["cmd"]], req["user"], cwd, user_env(req["user"], home, req.get("env")))
        except OSError as e:  # e.g. bash deleted by `rm -rf /`, or no pid left
            return failed(127, f"sparring: cannot start bash: {e}", req["cap"], started)
    deadline = started + float(req["timeout"])
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    captures = {out_fd: Capture(req["cap"]), err_fd: Capture(req["cap"])}  # streams still open
    finished = {}
    sel = selectors.DefaultSelector()
    for fd in captures:
        sel.register(fd, selectors.EVENT_READ)
    try:
        pidfd = os.pidfd_open(proc.pid)  # readable once bash exits
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):  # kernels before 5.3: poll every 10 ms
        pidfd = None
    timed_out = False
    ended_at = None  # when bash exited or was killed; after that only a short drain of the pipes
    while True:
        now = time.monotonic()
        if ended_at is None and (now >= deadline or (pidfd is None and proc.poll() is not None)):
            timed_out = now >= deadline
            kill_group(proc)
            ended_at = now
        if ended_at is not None and (not captures or now >= ended_at + DRAIN_GRACE_S):
            break
        wait = deadline - now if ended_at is None else ended_at + DRAIN_GRACE_S - now
        if pidfd is None and ended_at is None:
            wait = min(wait, 0.01)
        for key, _ in sel.select(max(0.0, wait)):
            if key.fd == pidfd:
                sel.unregister(pidfd)
                proc.wait()
                kill_group(proc)  # background processes end with the command
                ended_at = time.monotonic()
                continue
            data = os.read(key.fd, 65536)
            if data:
                captures[key.fd].add(data)
            else:
                sel.unregister(key.fd)
                finished[key.fd] = captures.pop(key.fd)
    finished.update(captures)
    if pidfd is not None:
        os.close(pidfd)
    sel.close()
    code = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return {
        "exit": code if code >= 0 else None,
        "signal": -code if code < 0 else None,
        "timed_out": timed_out,
        "oom": oom_kills() > ooms,
        "seconds": time.monotonic() - started,
        "out": finished[out_fd].result(),
        "err": finished[err_fd].result(),
    }


OPS = {"ping": lambda req: {}, "exec": op_exec, **FILE_OPS}


def main():
    requests = sys.stdin.buffer
    while True:
        STANDBY.prepare()
        line = requests.readline()
        if not line:
            return
        try:
            req = json.loads(line)
            reply = OPS[req["op"]](req)
        except Exception as e:  # every failure becomes an answer; the server keeps serving
            reply = {"error": type(e).__name__, "message": str(e), "errno": getattr(e, "errno", None)}
        write_line(reply)


if __name__ == "__main__":
    sys.exit(main())
