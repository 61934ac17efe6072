"""Time to a fully clean log: the dict-based offset map (commit 6d36e80) vs today's, interleaved.

Usage: PYTHONPATH=. python scripts/offset_map_compare.py RECORDS DISTINCT BUFFER_BYTES REPS [old,new]

Builds one dirty store changelog (RECORDS writes over DISTINCT keys in random order, rolled),
then cleans fresh copies of it to the end with each map, printing wall/CPU seconds, passes
and the SHA-256 of the final .log files (they must be equal).  The old map is taken from
git (``git show 6d36e80:changelog/offset_map.py``) into a temporary module.
"""

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import store_bench
from changelog.cleaner import offset_map as new_map
from changelog.cleaner import recopy as cleaner_recopy
from changelog.cleaner.clean import clean_log
from changelog.config import CleanerConfig, LogConfig
from changelog.log.log import Log

_OLD = subprocess.run(
    ["git", "show", "6d36e80:changelog/offset_map.py"], capture_output=True, text=True, check=True
).stdout
_old_path = Path(tempfile.mkdtemp()) / "old_offset_map.py"
_old_path.write_text(_OLD)
_spec = importlib.util.spec_from_file_location("old_offset_map", _old_path)
assert _spec is not None
assert _spec.loader is not None
old_offset_map = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(old_offset_map)

records, distinct, buf, reps = (int(x) for x in sys.argv[1:5])
base = Path(tempfile.mkdtemp(prefix="cleancmp-", dir=os.environ.get("STATESTORE_BENCH_DIR")))
log_dir = store_bench._build_dirty_log(base / "ss", records, distinct, 1000)


def digest(d):
    h = hashlib.sha256()
    for p in sorted(Path(d).glob("*.log")):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def run(kind):
    copy = base / "copy" / log_dir.name
    shutil.copytree(log_dir, copy)
    log = Log.open(copy, LogConfig())
    if kind == "old":
        m = old_offset_map.OffsetMap(buf)
        cleaner_recopy.key_hashes = old_offset_map.key_hashes
    else:
        m = new_map.OffsetMap(buf)
        cleaner_recopy.key_hashes = new_map.key_hashes
    config = CleanerConfig(dedupe_buffer_size_bytes=buf)
    t0 = time.perf_counter()
    c0 = time.process_time()
    passes = 0
    while True:
        st = clean_log(log, force=True, config=config, offset_map=m)
        if st is None:
            break
        passes += 1
        if st.end_offset >= st.first_uncleanable_offset:
            break
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    log.close()
    d = digest(copy)
    shutil.rmtree(base / "copy")
    return {
        "kind": kind,
        "wall": wall,
        "cpu": cpu,
        "passes": passes,
        "digest": d,
        "load": os.getloadavg()[0],
    }


kinds = sys.argv[5].split(",") if len(sys.argv) > 5 else ["old", "new"]
out = []
for r in range(reps):
    for k in kinds if r % 2 == 0 else kinds[::-1]:
        res = run(k)
        out.append(res)
        print(res, flush=True)
shutil.rmtree(base)
print(json.dumps(out))
