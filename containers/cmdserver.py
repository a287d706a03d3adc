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
  (only regular files; ``PermissionError`` answers the rest).
- ``put_tar`` {dest, data, user} / ``get_tar`` {path, max_file_bytes} -> {data}: a tar extracted
  into ``dest`` (owners as in the tar, or ``user`` when given) / a tar of ``path`` whose top entry
  is its base name (like ``docker cp``), without regular files larger than ``max_file_bytes``.

A failing request answers {error: exception class name, message}. The sandbox passes this file's
source to ``python3 -I -S -c``, so images need no copy of it and always run the current version.
"""

import base64
import io
import json
import os
import pwd
import selectors
import shlex
import signal
import stat
import subprocess
import sys
import tarfile
import time

#: After bash exits (or is killed), how long to wait for pipes still held by escaped processes.
DRAIN_GRACE_S = 0.2
#: Seconds a file operation done as a user may take (the user's processes could stop the child).
AS_USER_TIMEOUT_S = 120.0
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


def account(name):
    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid, entry.pw_dir


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


def chown_tree(path, uid, gid):
    os.lchown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)


def make_parents(path, uid, gid):
    parent = os.path.dirname(path)
    missing = []
    while parent and not os.path.isdir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for folder in reversed(missing):
        os.mkdir(folder)
        os.lchown(folder, uid, gid)


def run_as(name, work):
    """The answer ``work(uid, gid)`` gives in a child that has become ``name`` and nothing more.

    The child drops its supplementary groups, then its gid, then its uid; setuid away from root
    also clears every capability, so the kernel checks each access against that user alone (the
    server never changes its own ids). The child sends its answer, or its error, as JSON through a
    pipe. A child that is stopped or killed (the user's own processes may signal it) ends in a
    timeout or an error answer, never in a hung server.
    """
    uid, gid, _ = account(name)
    if uid == 0:
        raise ValueError("as_user must be an account other than root")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only os._exit leaves this block
        try:
            os.close(read_end)
            try:
                os.setgroups([])
                os.setgid(gid)
                os.setuid(uid)
                answer = work(uid, gid)
            except Exception as e:
                why = f"{e.strerror}: {e.filename}" if isinstance(e, OSError) and e.filename else str(e)
                answer = {"error": type(e).__name__, "message": why}
            view = memoryview(json.dumps(answer).encode())
            while view:
                view = view[os.write(write_end, view) :]
        finally:
            os._exit(0)
    os.close(write_end)
    received = bytearray()
    deadline = time.monotonic() + AS_USER_TIMEOUT_S
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(read_end, selectors.EVENT_READ)
            while True:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    os.kill(pid, signal.SIGKILL)
                    raise TimeoutError(f"the file operation as {name} took over {AS_USER_TIMEOUT_S:g} s")
                data = os.read(read_end, 1 << 20)
                if not data:
                    break
                received += data
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    try:
        return json.loads(received)
    except ValueError:
        raise OSError(f"the file operation as {name} was interrupted") from None


def open_regular(path, flags, mode=0o600):
    """A descriptor of the regular file ``path``; O_NONBLOCK so that a planted FIFO cannot block the open."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise (IsADirectoryError if stat.S_ISDIR(kind) else OSError)(f"not a regular file: {path}")
    return fd


def write_file(path, data, mode, uid, gid):
    """Write ``path`` (parents created) for uid:gid; never through a symbolic link at ``path``.

    As root the file is then chowned to uid:gid; a user (see run_as) owns what it creates, and
    sets the mode only of files it owns, like ``chmod``.
    """
    make_parents(path, uid, gid)
    if os.path.islink(path):
        os.unlink(path)  # never write through a link the agent may have planted
    fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if os.geteuid() == 0:
            os.fchown(fd, uid, gid)
        if os.fstat(fd).st_uid == uid:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return {}


def op_write(req):
    data = base64.b64decode(req["data"])
    if req.get("as_user"):
        return run_as(req["as_user"], lambda uid, gid: write_file(req["path"], data, req["mode"], uid, gid))
    uid, gid, _ = account(req["user"])
    return write_file(req["path"], data, req["mode"], uid, gid)


def read_file(path):
    with open(open_regular(path, os.O_RDONLY), "rb") as f:
        return {"data": base64.b64encode(f.read()).decode()}


def op_read(req):
    if req.get("as_user"):
        return run_as(req["as_user"], lambda uid, gid: read_file(req["path"]))
    with open(req["path"], "rb") as f:
        return {"data": base64.b64encode(f.read()).decode()}


def op_put_tar(req):
    dest = req["dest"]
    owner = account(req["user"]) if req.get("user") else None
    if not os.path.isdir(dest):
        uid, gid = owner[:2] if owner else (0, 0)
        make_parents(os.path.join(dest, "x"), uid, gid)
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(req["data"]))) as tar:
        tops = {m.name.lstrip("./").split("/")[0] for m in tar.getmembers()} - {""}
        if hasattr(tarfile, "tar_filter"):  # refuses absolute paths and ".." escapes
            tar.extractall(dest, numeric_owner=True, filter="tar")
        else:
            tar.extractall(dest, numeric_owner=True)
    if owner:
        for top in tops:
            target = os.path.join(dest, top)
            if os.path.lexists(target):
                chown_tree(target, owner[0], owner[1])
    return {}


def op_get_tar(req):
    path = req["path"].rstrip("/") or "/"
    if not os.path.lexists(path):
        raise FileNotFoundError(f"no such file or directory: {path}")
    limit = req.get("max_file_bytes")

    def small_enough(member):
        return None if limit is not None and member.isfile() and member.size > limit else member

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(path, arcname=os.path.basename(path) or ".", filter=small_enough)
    return {"data": base64.b64encode(buf.getvalue()).decode()}


OPS = {
    "ping": lambda req: {},
    "exec": op_exec,
    "write": op_write,
    "read": op_read,
    "put_tar": op_put_tar,
    "get_tar": op_get_tar,
}


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
            reply = {"error": type(e).__name__, "message": str(e)}
        write_line(reply)


if __name__ == "__main__":
    sys.exit(main())
