"""How fast perfstack reads and analyses a large torch.profiler trace.

Builds a trace of about ``--mb`` MB of JSON by concatenating copies of a real trace (each copy
shifted in time past the previous one, with fresh correlation / External ids, flow ids and
ProfilerStep numbers), written to a temporary directory as it is generated (never whole in
memory). Events are written as compact JSON, one per line, so a megabyte holds more events than
Kineto's indented output does (the conservative choice for a speed test).

Then, in a child process pinned to two cores (``taskset -c 0,1`` where available), it times

  (a) ``perfstack.profile.trace.load`` alone, and
  (b) the whole ``perfstack.profile.summary.profile_run([path])``,

each in a fresh child, and prints wall seconds, the CPU seconds (user + system) of the child and
the processes it starts (to read a large trace, to replay its timeline), the sum of those processes' own
peak RSS (sampled from /proc: an upper bound on what they held together) and what they held at once at
the fullest sample, events per second, and the machine's load average around the run: on a shared machine the wall time says as much about the neighbours as about perfstack. Then (c) ``perfstack profile --trace`` on a decompression bomb: a gzip file
of a few MB that expands to ``--bomb-gib`` GiB of whitespace (default 4), which must be refused
(exit 2) in bounded time and memory, whatever its expanded size.

    python benchmarks/profile_speed.py [--mb 1000] [--gz] [--source TRACE.json.gz] [--only load|run|bomb]
        [--repeat N] [--keep DIR] [--trace BIG.pt.trace.json] [--bomb-gib 4] [--split auto|on|off]

``--keep DIR`` keeps the synthesized trace there; ``--trace`` times such a trace again instead of
writing a new one.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
PREFERRED = FIXTURES / "validation" / "h100" / "gpt2-slow.pt.trace.json.gz"
STEP = re.compile(r"^ProfilerStep#(\d+)$")
GOAL_S, GOAL_MIB = 20.0, 1024  # what `perfstack profile --trace` may take on a 1 GB trace (2 cores)


def default_source() -> Path:
    if PREFERRED.exists():
        return PREFERRED
    traces = sorted(FIXTURES.rglob("*.pt.trace.json*"), key=lambda p: p.stat().st_size, reverse=True)
    if not traces:
        sys.exit(f"no traces under {FIXTURES}; pass --source")
    return traces[0]


def _read(source: Path) -> dict:
    raw = source.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    return doc


def synthesize(source: Path, target_mb: float, out: Path, gz: bool = False) -> dict:
    """Write about target_mb MB (uncompressed) of trace to ``out``; returns what was written."""
    doc = _read(source)
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed if isinstance(e.get("dur", 0), (int, float)))
    span = t1 - t0 + 1000.0
    ids = [e["args"].get(k) for e in events if isinstance(e.get("args"), dict) for k in ("correlation", "External id")]
    ids += [e.get("id") for e in events]
    id_step = max([i for i in ids if isinstance(i, int)] + [0]) + 1
    nums = [int(m.group(1)) for e in events if isinstance(e.get("name"), str) for m in [STEP.match(e["name"])] if m]
    step_step = (max(nums) + 1) if nums else 0
    enc = msgspec.json.Encoder()

    def copy(c: int) -> bytes:
        shift, off = c * span, c * id_step
        lines = []
        for e in events:
            e2 = dict(e)
            if isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = e2["ts"] + shift
            name = e2.get("name")
            if c and isinstance(name, str) and name.startswith("ProfilerStep#"):
                m = STEP.match(name)
                if m:
                    e2["name"] = f"ProfilerStep#{int(m.group(1)) + c * step_step}"
            if isinstance(e2.get("id"), int):
                e2["id"] += off
            a = e2.get("args")
            if isinstance(a, dict) and ("correlation" in a or "External id" in a):
                a = dict(a)
                for k in ("correlation", "External id"):
                    if isinstance(a.get(k), int):
                        a[k] += off
                e2["args"] = a
            lines.append(enc.encode(e2))
        return b",\n".join(lines)

    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    target = target_mb * 1e6
    opener = (lambda p: gzip.open(p, "wb", compresslevel=1)) if gz else (lambda p: open(p, "wb"))
    written, copies = 0, 0
    with opener(out) as f:
        start = enc.encode(head)[:-1] + (b', "traceEvents": [\n' if head else b'"traceEvents": [\n')
        f.write(start)
        written += len(start)
        while written < target or copies == 0:
            chunk = copy(copies)
            if copies:
                f.write(b",\n")
                written += 2
            f.write(chunk)
            written += len(chunk)
            copies += 1
        f.write(b"\n]}\n")
        written += 4
    return {"copies": copies, "events": copies * len(events), "json_bytes": written, "file_bytes": out.stat().st_size}


CHILD_LOAD = """
import sys, time
t0 = time.perf_counter()
from perfstack.profile.trace import load
t = load(sys.argv[1])
dt = time.perf_counter() - t0
print(f"{dt:.3f} {t.n_events} {len(t.gpu)} {len(t.runtime)} {len(t.ops)} {len(t.steps)} {t.skipped_events}")
"""

CHILD_RUN = """
import sys, time
t0 = time.perf_counter()
from perfstack.profile.summary import profile_run
run = profile_run([sys.argv[1]])
dt = time.perf_counter() - t0
print(f"{dt:.3f} {run.profile.n_steps} {len(run.findings)}")
"""


CHILD_CLI = """
import sys, time
t0 = time.perf_counter()
from perfstack.cli.main import main
rc = main(["profile", "--trace", sys.argv[1], "-q"])
print(f"{time.perf_counter() - t0:.3f} {rc}")
"""


def write_bomb(out: Path, gib: float) -> int:
    """A gzip file that expands to ``gib`` GiB of spaces: one 64 MiB member, compressed once and
    written again and again (readers take concatenated members in turn). Returns its size."""
    member = gzip.compress(b" " * (64 << 20), compresslevel=9)
    with open(out, "wb") as f:
        for _ in range(max(1, round(gib * 16))):
            f.write(member)
    return out.stat().st_size


# The wrapper around each child samples the memory of the child and of every process it starts (the second
# processes of a split reading and of the replays), every 20 ms from /proc: each process's own peak (VmHWM:
# its resident high-water mark since it started its program) and the sum of their resident sizes at each
# sample. The first figure, summed over the processes, is the one reported: their peaks need not fall at the
# same moment, so it is an upper bound on what they held together (the sampled sum is a lower one).
# getrusage's ru_maxrss is not used: Linux carries into a child the resident size of the process it was
# started from, up to its exec, so a process started by a large one reports that one's size.
WRAPPER = """
import os, resource, subprocess, sys, tempfile, time

def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return None

def tree(root):
    # the process and its descendants, less any started but not yet running its own program: until its exec
    # it is a copy of its parent (same command line), whose memory /proc counts again in it
    out, todo = [], [(root, None)]
    while todo:
        pid, parent = todo.pop()
        line = cmdline(pid)
        if parent is not None and line == parent:
            continue
        out.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [(int(c), line) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return out

def kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            d = dict(ln.split(":", 1) for ln in f if ln.startswith(("VmRSS:", "VmHWM:")))
        return int(d["VmRSS"].split()[0]), int(d["VmHWM"].split()[0])
    except (OSError, KeyError, ValueError):
        return None

with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
    p = subprocess.Popen(sys.argv[1:], stdout=out, stderr=err)
    hwm, at_once = {}, 0
    while p.poll() is None:
        now = 0
        for pid in tree(p.pid):
            m = kib(pid)
            if m:
                now += m[0]
                hwm[pid] = max(hwm.get(pid, 0), m[1])
        at_once = max(at_once, now)
        time.sleep(0.02)
    out.seek(0)
    err.seek(0)
    sys.stdout.write(out.read().decode())
    sys.stderr.write(err.read().decode())
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print("rss_kib", sum(hwm.values()), at_once, len(hwm), ru.ru_utime + ru.ru_stime)
sys.exit(p.returncode)
"""


def child(code: str, path: Path, cores: str | None) -> tuple[list[str], float, float, float, str]:
    """Run ``code`` on ``path`` in a fresh child; (its printed fields, wall s, peak RSS MiB, CPU s,
    the memory in words, the load average before and after).

    The child is started by a small wrapper process of its own, so that the wrapper's
    getrusage(RUSAGE_CHILDREN) is the CPU time of this one measurement alone (it includes the processes the
    child started), and the wrapper samples their memory (WRAPPER). The peak RSS is the processes' own
    peaks, summed."""
    cmd = [sys.executable, "-c", code, str(path)]
    if cores and shutil.which("taskset"):
        cmd = ["taskset", "-c", cores] + cmd
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = _load_avg()
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", WRAPPER] + cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - t0
    load = f"load {before} -> {_load_avg()}"
    if r.returncode:
        raise RuntimeError(r.stderr.strip()[-3000:] or f"exit {r.returncode}")
    lines = r.stdout.strip().splitlines()
    _, kib, at_once, n, cpu = lines[-1].split()
    fields = lines[-2].split()
    mem = f"{n} processes' own peaks summed; {float(at_once) / 1024:.0f} MiB at once, sampled"
    return fields, wall, float(kib) / 1024, float(cpu), f"{mem}; {load}"


def _load_avg() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def bomb(d: Path, args: argparse.Namespace) -> None:
    path = d / "bomb.pt.trace.json.gz"
    size = write_bomb(path, args.bomb_gib)
    fields, wall, rss, _, _ = child(CHILD_CLI, path, args.cores)
    print(f"bomb:        {args.bomb_gib:g} GiB of whitespace in {size / 1e6:.1f} MB gzip: "
          f"perfstack profile --trace exit {fields[1]} after {float(fields[0]):.2f} s, "
          f"{wall:.2f} s wall, peak RSS {rss:.0f} MiB")


# --split: whether a large plain trace is read by two processes (profile/traceread.py), whatever
# the machine's load (on), never (off), or as perfstack decides (auto: when a core is spare)
SPLIT = {"auto": "", "on": "import perfstack.profile.traceread as r; r.spare_core = lambda: True\n",
         "off": "import perfstack.profile.traceread as r; r.MIN_BYTES = 1 << 62\n"}


def best_of(code: str, path: Path, args: argparse.Namespace) -> tuple[float, float, float, float, str, list[str]]:
    """The fastest of --repeat runs of ``code``: (seconds it printed, wall, peak RSS MiB, CPU s, load, fields)."""
    best = None
    code = SPLIT[args.split] + code
    for _ in range(max(1, args.repeat)):
        fields, wall, rss, cpu, load = child(code, path, args.cores)
        dt = float(fields[0])
        if best is None or dt < best[0]:
            best = (dt, wall, rss, cpu, load, fields)
    assert best is not None
    return best


def _events(path: Path):
    """The events of a trace this script wrote (one per line), to count them without loading it."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        for line in f:
            if line.startswith(b"{") and not line.startswith(b'{"traceEvents') and b'"ph"' in line:
                yield line


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
        with open("/proc/meminfo") as f:
            mem = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal"))) / 2**20
        return f"{os.cpu_count()} CPUs ({cpu}), {mem:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        return f"{os.cpu_count()} CPUs ({cpu})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=1000, help="uncompressed JSON size to synthesize (default 1000)")
    ap.add_argument("--gz", action="store_true", help="write the synthetic trace gzip-compressed")
    ap.add_argument("--source", type=Path, default=None, help="real trace to copy (default: the largest fixture)")
    ap.add_argument("--only", choices=("load", "run", "bomb"), default=None, help="time only one of the three")
    ap.add_argument("--bomb-gib", type=float, default=4.0, help="expanded size of the decompression bomb (default 4)")
    ap.add_argument("--repeat", type=int, default=1, help="time each N times, report the fastest")
    ap.add_argument("--split", choices=tuple(SPLIT), default="auto",
                    help="read a large plain trace with two processes: auto (when a core is spare), on, off")
    ap.add_argument("--cores", default="0,1", help="CPU list for taskset (default 0,1; '' for none)")
    ap.add_argument("--keep", type=Path, default=None, help="write the trace here and keep it")
    ap.add_argument("--trace", type=Path, default=None, help="time this trace (one --keep wrote) instead of writing one")
    args = ap.parse_args()
    source = args.source or (None if args.trace else default_source())
    tmp = None
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        d = args.keep
    else:
        tmp = tempfile.TemporaryDirectory(prefix="perfstack-bench-")
        d = Path(tmp.name)
    try:
        if args.only == "bomb":
            bomb(d, args)
            return
        if args.trace:
            out = args.trace
            n = sum(1 for _ in _events(out))
            print(f"trace {out}: {n:,} events, {out.stat().st_size / 1e6:.0f} MB")
        else:
            out = d / ("big.pt.trace.json" + (".gz" if args.gz else ""))
            t0 = time.perf_counter()
            info = synthesize(source, args.mb, out, args.gz)
            n = info["events"]
            print(f"source {source.relative_to(ROOT) if source.is_relative_to(ROOT) else source}: "
                  f"{info['copies']} copies, {n:,} events, {info['json_bytes'] / 1e6:.0f} MB JSON"
                  + (f" ({info['file_bytes'] / 1e6:.0f} MB gzip)" if args.gz else "")
                  + f", written in {time.perf_counter() - t0:.0f} s")
        pinned = f"cores {args.cores}" if args.cores and shutil.which("taskset") else "not pinned"
        print(f"machine: {machine()}, child {pinned}, Python {sys.version.split()[0]}, "
              f"msgspec {msgspec.__version__}")
        if args.only in (None, "load"):
            dt, wall, rss, cpu, load, f = best_of(CHILD_LOAD, out, args)
            n = int(f[1])
            print(f"load:        {dt:6.2f} s in load(), {wall:6.2f} s wall incl. start-up, {cpu:6.2f} s CPU, "
                  f"peak RSS {rss:5.0f} MiB, {n / dt / 1e6:.2f} M events/s  (gpu {f[2]}, runtime {f[3]}, "
                  f"ops {f[4]}, steps {f[5]}, skipped {f[6]}; {load})")
        if args.only in (None, "run"):
            try:
                dt, wall, rss, cpu, load, f = best_of(CHILD_RUN, out, args)
                print(f"profile_run: {dt:6.2f} s in profile_run(), {wall:6.2f} s wall, {cpu:6.2f} s CPU, "
                      f"peak RSS {rss:5.0f} MiB, {n / dt / 1e6:.2f} M events/s  ({f[1]} steps, {f[2]} findings; "
                      f"{load})")
                # the goal for a 1 GB trace on two cores; the CPU seconds are the figure a busy machine
                # does not inflate as much as the wall time
                print(f"goal (1 GB trace, 2 cores): <= {GOAL_S:g} s and <= {GOAL_MIB} MiB: "
                      f"{'met' if wall <= GOAL_S and rss <= GOAL_MIB else 'not met'} by wall time, "
                      f"{'met' if cpu <= GOAL_S and rss <= GOAL_MIB else 'not met'} by CPU time")
            except RuntimeError as e:
                print(f"profile_run: failed: {str(e).splitlines()[-1] if str(e) else e}")
        if args.only is None:
            if not args.keep and not args.trace:
                out.unlink()  # room on disk for the bomb
            bomb(d, args)
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
