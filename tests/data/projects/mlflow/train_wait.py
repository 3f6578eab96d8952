"""A run left for MLflow to end at exit, as many scripts do: logs a step, waits until
/tmp/go exists (at most 120 s), then exits."""

import os
import time

import mlflow

run = mlflow.start_run()
mlflow.log_metric("loss", 1.0, step=0)
print(run.info.run_id, flush=True)
deadline = time.monotonic() + 120
while not os.path.exists("/tmp/go") and time.monotonic() < deadline:
    time.sleep(0.2)
