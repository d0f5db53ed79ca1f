"""profhost._opscache: the torch operator observer's first-use builds, and
the only places they are loaded from. Not an API.

When the build of profhost made no observer for the torch imported
(profhost._ops), the bridge builds one with torch.utils.cpp_extension and
keeps it in a cache: PROF_TORCH_OPS_CACHE, else
$XDG_CACHE_HOME/profhost/torchops, else ~/.cache/profhost/torchops, one
folder ``torch-<version>-<hash>`` per torch (version, git revision, CUDA,
the libtorch_cpu file), Python and observer source (observer.cpp and
torchops_abi.h), holding ``profhost_torchops.so`` and its SHA-256.

Code is loaded from there only when nobody but the user (or root) can have
written it, the way ssh checks its key files:

* the cache folder and every folder above it, up to ``/``, after symbolic
  links are resolved, is owned by root or the user and is not writable by
  group or others; a folder owned by root with the sticky bit (``/tmp``,
  mode 1777) is let through, since others can neither rename nor remove
  what the user owns in it;
* the library, opened without following a symbolic link, is a regular
  file owned by the user and not writable by group or others (fstat on the
  descriptor that is then read for its digest).

With every folder on the way writable only by root and the user, nobody
else can change what that path names between the check and dlopen. Where
a check fails the bridge says so once and builds into a private folder
instead: a fresh mkdtemp (mode 0700) under the system's temporary folder,
itself checked, removed at exit. A library whose digest does not match
(truncated, overwritten) is not handed to dlopen: it is rebuilt, once.

Builds go to a fresh ``.build-*`` folder inside the cache folder and only
the finished library is renamed into place (its digest first), so a
concurrent run never sees half a library; two runs building at once both
leave a good one (at worst a digest of the other's, rebuilt once later).

Functions here run in the bridge's threads (the training thread for a
forced observer, a background thread otherwise), one build at a time
(profhost._ops). Failures are raised as ``Problem`` (a sentence and its
fix) or OSError.
"""

import hashlib
import os
import stat
import sys

LIB = "profhost_torchops.so"
_NAME = "profhost_torchops"
_DIGEST = LIB + ".sha256"


class Problem(Exception):
    """Why a folder or file is not trusted: ``what`` (the path and what is
    wrong with it) and ``fix`` (what the user can do)."""

    def __init__(self, what, fix):
        Exception.__init__(self, what)
        self.what, self.fix = what, fix


def named():
    """How the user names the cache: the variable when set, else the
    default folder."""
    env = os.environ.get("PROF_TORCH_OPS_CACHE")
    if env:
        return "PROF_TORCH_OPS_CACHE=%s" % env
    return "the observer cache %s" % _base()


def _base():
    return os.environ.get("PROF_TORCH_OPS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "profhost", "torchops")


def folder(source, torch_cpu):
    """The cache folder for this torch, Python and observer source
    (``source``: observer.cpp's path; ``torch_cpu()``: the path of the
    libtorch_cpu this process runs, or None). Not made, not checked."""
    import torch

    digest = hashlib.sha1(b"profhost-torchops 2")
    srcdir = os.path.dirname(source)
    for name in (os.path.basename(source), "torchops_abi.h"):
        with open(os.path.join(srcdir, name), "rb") as f:
            digest.update(b"\0" + name.encode() + b"\0" + f.read())
    for part in (torch.__version__, getattr(torch.version, "git_version", ""),
                 str(torch.version.cuda), torch_cpu() or "", sys.version):
        digest.update(b"\0" + str(part).encode())
    return os.path.join(_base(), "torch-%s-%s" % (torch.__version__.replace("/", "_"),
                                                   digest.hexdigest()[:16]))


def dir_problem(path):
    """Raises Problem unless `path` (an existing folder) and every folder
    above it are trusted (the module's rules). Returns its real path."""
    uid = os.geteuid()
    real = os.path.realpath(path)
    d = real
    while True:
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode):
            raise Problem("%s is not a folder" % d, "choose a folder of your own")
        if st.st_uid not in (0, uid):
            raise Problem("%s is owned by uid %d, not by you (uid %d) or root"
                          % (d, st.st_uid, uid), "choose a folder of your own")
        if st.st_mode & 0o022 and not (st.st_uid == 0 and st.st_mode & stat.S_ISVTX):
            raise Problem("%s has mode %04o (group or others can write to it)"
                          % (d, stat.S_IMODE(st.st_mode)), "chmod go-w %s" % d)
        up = os.path.dirname(d)
        if up == d:
            return real
        d = up


def prepare(where):
    """Makes the cache folder `where` (missing levels mode 0700, and only
    below a trusted folder) and checks it. Returns its real path; raises
    Problem."""
    missing = []
    d = os.path.abspath(where)
    while not os.path.lexists(d):
        missing.append(d)
        d = os.path.dirname(d)
    if missing:
        dir_problem(d)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise Problem("%s cannot be made (%s)" % (d, exc.strerror or exc),
                          "choose a folder you can write to")
    return dir_problem(where)


def lookup(where):
    """The library in the checked cache folder `where`: its path when it
    is there, trusted and whole; None when there is none. Raises Problem
    (not trusted: not to be touched) or Corrupt (to be rebuilt)."""
    path = os.path.join(where, LIB)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if os.path.islink(path):
            raise Problem("%s is a symbolic link" % path, "remove it")
        raise Corrupt("%s cannot be read (%s)" % (path, exc.strerror or exc))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Problem("%s is not a regular file" % path, "remove it")
        if st.st_uid != os.geteuid():
            raise Problem("%s is owned by uid %d, not by you (uid %d)"
                          % (path, st.st_uid, os.geteuid()), "remove it")
        if st.st_mode & 0o022:
            raise Problem("%s has mode %04o (group or others can write to it)"
                          % (path, stat.S_IMODE(st.st_mode)), "chmod go-w %s" % path)
        h = hashlib.sha256()
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            h.update(block)
    finally:
        os.close(fd)
    try:
        with open(os.path.join(where, _DIGEST)) as f:
            want = f.read(200).strip()
    except OSError:
        want = ""
    if want != h.hexdigest():
        raise Corrupt("%s is not the library that was built there (%s)"
                      % (path, "its digest differs" if want else "no digest"))
    return path


class Corrupt(Exception):
    """A cached library that must not be loaded as it is (rebuilt once)."""


_temporary = []      # (pid, folder): build folders removed at exit


def _remove_at_exit(d):
    import atexit

    if not _temporary:
        atexit.register(_remove_temporary)
    _temporary.append((os.getpid(), d))


def _remove_temporary():
    import shutil

    for pid, d in _temporary:
        if pid == os.getpid():   # not a forked child's exit
            shutil.rmtree(d, ignore_errors=True)


def private_folder():
    """A fresh folder (mode 0700) of this process's own for a build, under
    the system's temporary folder, checked; removed at this process's exit.
    Raises Problem or OSError."""
    import tempfile

    d = tempfile.mkdtemp(prefix="profhost-torchops-")
    _remove_at_exit(d)
    dir_problem(d)
    return d


def build(work, source):
    """Builds the observer against the imported torch in the folder `work`
    (fresh, the caller's), in a child interpreter with profhost off (no
    LD_PRELOAD, PROF_DISABLE): the compiler and ninja must not run under
    profhost, and this process's environment is never changed. Leaves only
    the library there (mode 0755) and returns its path; raises OSError or
    BuildFailed (the build's last words)."""
    import subprocess

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PROF_") and k not in ("LD_PRELOAD", "NVTX_INJECTION64_PATH",
                                                      "CUDA_INJECTION64_PATH")}
    env["PROF_DISABLE"] = "1"
    code = ("import sys\nfrom torch.utils import cpp_extension\n"
            "cpp_extension.load(name=%r, sources=[%r], extra_include_paths=[%r],"
            " extra_cflags=['-O2'], build_directory=%r, is_python_module=False,"
            " verbose=False)\n" % (_NAME, source, os.path.dirname(source), work))
    try:
        r = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=900)
    except subprocess.SubprocessError as exc:
        raise BuildFailed(str(exc), "")
    if r.returncode != 0:
        last = [l for l in r.stderr.strip().splitlines() if l.strip()]
        raise BuildFailed(last[-1] if last else "exit %d" % r.returncode, r.stderr)
    path = os.path.join(work, LIB)
    if not os.path.isfile(path):
        raise BuildFailed("the build left no %s" % path, r.stderr)
    for name in os.listdir(work):
        if name != LIB:
            _remove(os.path.join(work, name))
    os.chmod(path, 0o755)
    return path


class BuildFailed(Exception):
    """The build failed: its last line (str) and its whole stderr (.log)."""

    def __init__(self, last, log):
        Exception.__init__(self, last)
        self.log = log


def build_into(where, source):
    """Builds the observer in a fresh folder inside the checked cache
    folder `where` and renames the library into place (its digest first).
    Returns the library's path; raises OSError or BuildFailed. The build
    folder is removed when done, or at exit (a background build the
    program's end cut short)."""
    import shutil
    import tempfile

    work = tempfile.mkdtemp(prefix=".build-", dir=where)
    _remove_at_exit(work)
    try:
        built = build(work, source)
        with open(built, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        tmp = os.path.join(work, _DIGEST)
        with open(tmp, "w") as f:
            f.write(digest + "\n")
        os.replace(tmp, os.path.join(where, _DIGEST))
        path = os.path.join(where, LIB)
        os.replace(built, path)
        return path
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _remove(path):
    import shutil

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass
