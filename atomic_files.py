"""
Files written so that an interruption never leaves a half state behind, without torch (the data preparation uses
them too): a writer's temp files carry its pid, and those of dead writers are removed (a kill -9 runs no clean-up);
the token files a prepare writes are replaced together behind the meta.json that records their lengths, which
evaluate.check_token_file compares, so a pair half replaced by an interrupted prepare is refused, never read.
"""
import contextlib
import glob
import json
import math
import os
import signal
import threading
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """A process `pid` exists and has not exited (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, someone else's
        pass
    try:  # Linux: state Z = exited
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def remove_stale_temps(path) -> list:
    """Remove `path`.tmp.[<thread>.]<pid> files whose process is gone (left by a kill during a write)."""
    removed = []
    for tmp in glob.glob(glob.escape(os.fspath(path)) + ".tmp.*"):
        pid = tmp.rsplit(".", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            try:
                os.remove(tmp)
                removed.append(tmp)
            except OSError:
                pass
    return removed


def atomic_write(path: str, write) -> None:
    """write(tmp_path), fsync, then rename onto `path`: a crash or kill at any point leaves `path` as
    it was or complete, never half-written. A failed write removes its temp file; temp files that
    dead processes left beside `path` are removed after a successful one."""
    path = os.fspath(path)
    tmp = f"{path}.tmp.{threading.get_ident()}.{os.getpid()}"  # one a writer: threads of a process apart too
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    _fsync_dir(os.path.dirname(path) or ".")
    remove_stale_temps(path)


def _fsync_dir(folder: str) -> None:
    try:  # make the rename itself durable (best effort: not every OS lets a folder be opened)
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _json_safe(obj):
    """NaN and infinities become null: JSON has no such numbers (json.dump would write bare NaN)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def write_json(path: str, obj) -> None:
    """Valid JSON (non-finite numbers as null), written atomically."""
    text = json.dumps(_json_safe(obj), indent=2, allow_nan=False)

    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text + "\n")
    atomic_write(path, write)


def write_text(path, text: str) -> None:
    """A text file (a table, a report), written atomically."""
    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    atomic_write(path, write)


def replace_together(out_dir, temps: dict, meta: dict) -> None:
    """Rename each finished temp file onto out_dir/<name> ({'train.bin': tmp, ...}), after meta.json (written
    atomically) records the lengths the new files have (meta['train_tokens'], ...): until the last rename a reader
    that compares a file with meta.json (evaluate.check_token_file) sees the mismatch of an interrupted replacement
    and says to re-run the prepare, instead of training on a new train.bin beside an old val.bin."""
    out_dir = Path(out_dir)
    write_json(out_dir / "meta.json", meta)
    for name, tmp in temps.items():
        os.replace(tmp, out_dir / name)


def remove_stale_outputs(out_dir, names=("train.bin", "val.bin", "meta.json")) -> list:
    """remove_stale_temps for each of a prepare's outputs in out_dir (a killed earlier prepare's temp files)."""
    return [t for name in names for t in remove_stale_temps(Path(out_dir) / name)]


def check_num_proc(num_proc) -> None:
    """The prepares' --num_proc, checked before anything is read or written: an integer of at least 1 (1 tokenizes
    in the calling process, more in a worker_pool)."""
    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"--num_proc={num_proc}: the number of tokenizer processes, an integer of at least 1 "
                         f"(1 tokenizes in this process)")


def worker_pool(processes: int, initializer=None, initargs=()):
    """multiprocessing.Pool whose workers start with SIGTERM at its default. Forked inside interrupt_on_sigterm,
    a worker would hold the parent's handler until its initializer put the default back, and a pool.terminate()
    whose SIGTERM reached it in that window was lost (the handler replaced before it ran): the worker then waited for
    a task forever, and terminate() for it (seen: an enwiki pack that hung after succeeding). So the workers are
    forked with the default in place (a SIGTERM to the parent in those milliseconds ends it without its clean-up;
    the next prepare removes what it left: remove_stale_outputs). Only the main thread can set handlers."""
    import multiprocessing as mp
    if threading.current_thread() is not threading.main_thread():
        return mp.Pool(processes, initializer=initializer, initargs=initargs)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        return mp.Pool(processes, initializer=initializer, initargs=initargs)
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_pool(pool) -> None:
    """pool.terminate() for an error or an interrupt, one that cannot hang on a worker the same signal already ended.
    A SIGTERM to the whole process group (`kill -TERM -- -PGID`, a scheduler's stop) ends the workers at once (SIGTERM
    at its default: worker_pool); an idle worker waits for its next task holding the task queue's read lock (one
    writing its result, the result queue's write lock), and with its process gone nothing releases it: terminate()
    waited for that lock forever (seen: both prepares hung so). So the pool's worker handler is stopped first (no
    replacement workers: one forked now would hold the parent's SIGTERM handler, and could lose terminate()'s signal),
    every worker is killed (their results are never read), the locks a dead worker held are released, then
    terminate(). Pool's private attributes: where one is missing (another Python), just terminate()."""
    import multiprocessing.pool as mpool
    handler, notifier = getattr(pool, "_worker_handler", None), getattr(pool, "_change_notifier", None)
    queues = getattr(pool, "_inqueue", None), getattr(pool, "_outqueue", None)
    if handler is not None and notifier is not None and None not in queues and hasattr(pool, "_pool"):
        handler._state = mpool.TERMINATE
        notifier.put(None)
        if handler is not threading.current_thread():
            handler.join()
        for p in list(pool._pool):
            if p.exitcode is None:
                p.kill()
            p.join()
        for lock in (queues[0]._rlock, queues[1]._wlock):
            if lock is not None:
                try:
                    lock.release()  # held by a dead worker (every worker is dead now: no live holder is robbed)
                except ValueError:  # not held
                    pass
    pool.terminate()


def terminate_pool(pool, timeout: float = 10.0) -> bool:
    """stop_pool(pool) that stops waiting after `timeout` s; True if it finished. What stop_pool cannot prevent can
    still hang for ever (python/cpython#73945, #78178): terminate's task handler, caught writing a task larger than
    the pipe's buffer (a chunk of documents), blocks once the workers are gone, and terminate joins it (seen: 1 kill in
    ~50 of a prepare, which then hung instead of exiting). The workers are ended before that join; the stuck thread
    is a daemon, left behind. Never pool.join() a pool this gave up on."""
    t = threading.Thread(target=stop_pool, args=(pool,), name="terminate_pool", daemon=True)
    t.start()
    t.join(timeout)
    return not t.is_alive()


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def interrupt_on_sigterm():
    """Inside: a SIGTERM (kill, a scheduler's stop) raises KeyboardInterrupt as Ctrl-C does, so a prepare's
    clean-up of its temp files runs; the previous handler comes back after. (A pool's workers are forked with
    the default: worker_pool.) Only the main thread can set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
