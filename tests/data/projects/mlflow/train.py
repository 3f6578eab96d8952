"""A plain MLflow training script: one run, a few logged steps, its run id on stdout."""

import mlflow

with mlflow.start_run() as run:
    for step in range(5):
        mlflow.log_metric("loss", 1.0 / (step + 1), step=step)
print(run.info.run_id)
