"""Run a command and print one JSON line: its wall time, CPU time, status, stdout and the end of
stderr.

Used the same way on the host and inside the container (``python -I -S``: no site, so the
runtime's start-up hook does not run in the timer itself), so that both sides are timed alike
and the docker exec round trip stays outside the measurement.
"""

import json
import resource
import subprocess
import sys
import time

start = time.perf_counter()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=False)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
result = {
    "wall_s": wall,
    "cpu_s": usage.ru_utime + usage.ru_stime,
    "rc": proc.returncode,
    "stdout": proc.stdout,
    "stderr_tail": proc.stderr[-3000:],
}
print(json.dumps(result))
