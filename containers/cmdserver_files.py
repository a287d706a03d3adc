"""The command server's file operations: one file as root or as a user, and tar archives in and out.

Part of the command server (``cmdserver.py``, whose docstring gives the protocol): the sandbox
sends this file's source and then the server's as one program (``channel.server_command``), so
the names here are the server's own. Kept apart so that each half stays readable.
"""

import base64
import errno
import io
import json
import os
import pwd
import selectors
import signal
import stat
import tarfile
import time

#: Seconds a file operation done as a user may take (the user's processes could stop the child).
AS_USER_TIMEOUT_S = 120.0


def account(name):
    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid, entry.pw_dir


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
                answer = {"error": type(e).__name__, "message": why, "errno": getattr(e, "errno", None)}
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
    """A descriptor of the regular file ``path``; O_NONBLOCK so that a planted FIFO cannot block the open.

    Anything else (FIFO, socket, device, folder) is refused with an errno, so that the host raises
    an OSError, which the callers of a failed read already expect.
    """
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):
        os.close(fd)
        raise OSError(errno.EISDIR if stat.S_ISDIR(kind) else errno.EINVAL, "not a regular file", path)
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


class FileTooLargeError(OSError):
    """A file over the size the harness reads back (the host maps the name to its own class)."""


def read_capped(f, path, max_bytes):
    """The bytes of an open file, refusing more than ``max_bytes`` (None: no cap).

    The size is checked before reading where the file has one, and the read itself stops one byte
    past the cap, so neither a huge or sparse file nor one that grows meanwhile is read whole.
    """
    if max_bytes is None:
        return f.read()
    size = os.fstat(f.fileno()).st_size
    data = f.read(max_bytes + 1) if size <= max_bytes else b""
    if size > max_bytes or len(data) > max_bytes:
        raise FileTooLargeError(f"{path} holds {max(size, len(data))} bytes, over the {max_bytes} read back at most")
    return data


def read_file(path, max_bytes=None, flags=os.O_RDONLY):
    with open(open_regular(path, flags), "rb") as f:
        return {"data": base64.b64encode(read_capped(f, path, max_bytes)).decode()}


def op_read(req):
    """Read one file: as a user with that user's rights, else as root a regular file that is no link.

    Root reads paths the agent's processes can replace (a test report, a parser's output): a FIFO
    there must not block the server, and a link must not show root what it points to.
    """
    cap = req.get("max_bytes")
    if req.get("as_user"):
        return run_as(req["as_user"], lambda uid, gid: read_file(req["path"], cap))
    return read_file(req["path"], cap, os.O_RDONLY | os.O_NOFOLLOW)


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


def list_folder(path):
    """The names in the folder ``path``; a link put in its place since it was looked at is refused, not followed."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


#: Examples named per kind of left-out entry (the counts are complete).
LEFT_OUT_EXAMPLES = 5


class CappedTree:
    """A tar of a tree read within caps, depth first in name order, and a record of what was left out.

    Each regular file is read into memory first (at most its cap plus one byte) and stored with
    the size actually read, so a file that grows or shrinks while the agent's processes still run
    can neither overrun the caps nor break the archive.
    """

    def __init__(self, caps):
        self.entries = caps.get("entries")
        self.tar_bytes = caps.get("tar_bytes")
        self.file_bytes = caps.get("file_bytes")
        self.depth = caps.get("depth")
        self.path_chars = caps.get("path_chars")
        self.exclude = set(caps.get("exclude") or ())
        self.buf = io.BytesIO()
        self.tar = tarfile.open(fileobj=self.buf, mode="w", format=tarfile.PAX_FORMAT)
        self.count = 0
        self.stopped = None  # why the walk stopped early, if it did
        self.left_out = {}  # kind -> {"count": n, "examples": [...]}

    def leave_out(self, kind, name):
        entry = self.left_out.setdefault(kind, {"count": 0, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < LEFT_OUT_EXAMPLES:
            entry["examples"].append(name[:300])

    def full(self):
        if self.entries is not None and self.count >= self.entries:
            self.stopped = "entries"
        elif self.tar_bytes is not None and self.buf.tell() >= self.tar_bytes:
            self.stopped = "tar_bytes"
        return self.stopped is not None

    def add(self, path, arcname, depth):
        if self.full():
            return
        if self.path_chars is not None and len(arcname) > self.path_chars:
            return self.leave_out("path_chars", arcname)
        # A hard link is archived as the file it is, with its own contents: a link member holds no
        # data, so a reader keeping regular files would see a deletion, and the caps may have left
        # its target out. gettarinfo makes a link of any inode it has seen, so it is shown none.
        self.tar.inodes.clear()
        try:
            info = self.tar.gettarinfo(path, arcname)
        except OSError:
            return self.leave_out("unreadable", arcname)
        if info is None:  # a socket: nothing to archive
            return self.leave_out("special", arcname)
        data = None
        if info.isfile():
            if self.file_bytes is not None and info.size > self.file_bytes:
                return self.leave_out("file_bytes", arcname)
            try:
                with open(open_regular(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as f:
                    data = read_capped(f, path, self.file_bytes)
            except OSError:  # vanished, replaced, or grew past the cap meanwhile
                return self.leave_out("unreadable", arcname)
            info.size = len(data)
            room = None if self.tar_bytes is None else self.tar_bytes - self.buf.tell()
            if room is not None and len(data) + 1536 + len(arcname) > room:
                return self.leave_out("tar_bytes", arcname)
        self.tar.addfile(info, io.BytesIO(data) if data is not None else None)
        self.count += 1
        if info.isdir():
            if self.depth is not None and depth >= self.depth:
                return self.leave_out("depth", arcname + "/")
            try:
                names = sorted(list_folder(path))
            except OSError:  # vanished, or replaced by a link or a file meanwhile
                return self.leave_out("unreadable", arcname + "/")
            for name in names:
                if self.full():
                    return
                if name in self.exclude:
                    continue
                self.add(os.path.join(path, name), f"{arcname}/{name}", depth + 1)

    def result(self):
        self.tar.close()
        return {"data": base64.b64encode(self.buf.getvalue()).decode(), "left_out": self.left_out,
                "stopped": self.stopped, "entries": self.count}  # fmt: skip


def op_get_tar(req):
    path = req["path"].rstrip("/") or "/"
    if not os.path.lexists(path):
        raise FileNotFoundError(f"no such file or directory: {path}")
    caps = dict(req.get("caps") or {})
    if req.get("max_file_bytes") is not None:
        caps["file_bytes"] = req["max_file_bytes"]
    tree = CappedTree(caps)
    tree.add(path, os.path.basename(path) or ".", 0)
    return tree.result()


FILE_OPS = {
    "write": op_write,
    "read": op_read,
    "put_tar": op_put_tar,
    "get_tar": op_get_tar,
}
