#!/usr/bin/env python3
"""Runs every test executable of `cargo test --workspace --all-targets`, two at a time.

cargo test runs its test binaries one after another; most of keel's are black-box tests that spend their
time waiting on clusters, so two lanes roughly halve the wall time on a 2-core machine without crowding it.
The binaries known to be longest start first so the lanes end together. Each binary runs in its package's
directory (as cargo runs it), its output goes to a log printed in full when it fails, and the exit status is
non-zero if any binary failed. Arguments after `--` go to every test binary.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

LANES = int(os.environ.get("KEEL_TEST_LANES", "2"))
# Longest first (seconds measured on 2 cores); the rest keep cargo's order.
LONG = ["campaign", "controllers_batch", "cluster", "controllers_nodes", "controllers_deployment",
        "node_agent", "services", "controllers", "snapshot", "controllers_sets", "crash", "etcdctl_diff", "scheduler"]


def executables():
    out = subprocess.run(
        ["cargo", "test", "--workspace", "--all-targets", "--no-run", "--message-format=json-render-diagnostics"],
        check=True, stdout=subprocess.PIPE, text=True).stdout
    seen, bins = set(), []
    for line in out.splitlines():
        try:
            m = json.loads(line)
        except ValueError:
            continue
        if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
            continue
        if m["executable"] in seen:
            continue
        seen.add(m["executable"])
        bins.append((m["target"]["name"], m["executable"], os.path.dirname(m["manifest_path"])))
    rank = {n: i for i, n in enumerate(LONG)}
    bins.sort(key=lambda b: rank.get(b[0], len(LONG)))
    return bins


def main():
    extra = sys.argv[sys.argv.index("--") + 1:] if "--" in sys.argv else []
    bins = executables()
    logs = tempfile.mkdtemp(prefix="keel-test-logs-")
    lock = threading.Lock()
    queue = list(bins)
    results = []

    def lane():
        while True:
            with lock:
                if not queue:
                    return
                name, exe, cwd = queue.pop(0)
            log = os.path.join(logs, f"{name}-{os.path.basename(exe)}.log")
            start = time.monotonic()
            with open(log, "w") as f:
                rc = subprocess.run([exe] + extra, cwd=cwd, stdout=f, stderr=subprocess.STDOUT).returncode
            secs = time.monotonic() - start
            summary = ""
            with open(log, errors="replace") as f:
                for l in f:
                    if l.startswith("test result:"):
                        summary = l.strip()
            with lock:
                results.append((name, exe, rc, secs, log, summary))
                print(f"{'ok  ' if rc == 0 else 'FAIL'} {secs:7.1f}s {name}: {summary or f'exit {rc}'}", flush=True)

    threads = [threading.Thread(target=lane) for _ in range(LANES)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [r for r in results if r[2] != 0]
    for name, exe, rc, secs, log, _ in failed:
        print(f"\n==> {name} ({exe}) failed with exit {rc}; its output:", flush=True)
        with open(log, errors="replace") as f:
            sys.stdout.write(f.read())
    passed = sum(int(s.split()[3]) for *_, s in results if s.startswith("test result:") and len(s.split()) > 3 and s.split()[3].isdigit())
    fails = sum(int(s.split()[5]) for *_, s in results if s.startswith("test result:") and len(s.split()) > 5 and s.split()[5].isdigit())
    print(f"\n{len(results)} test binaries in {time.monotonic() - t0:.0f}s over {LANES} lanes: "
          f"{passed} tests passed, {fails} failed, {len(failed)} binaries failed (logs in {logs})", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
