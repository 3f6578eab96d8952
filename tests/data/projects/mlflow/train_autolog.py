"""An MLflow autolog training script: scikit-learn's fit opens the run, not the program."""

import mlflow
import numpy as np
from sklearn.linear_model import LogisticRegression

mlflow.autolog(log_models=False, log_datasets=False)
rng = np.random.default_rng(0)
features = rng.normal(size=(200, 4))
labels = (features[:, 0] + rng.normal(size=200) > 0).astype(int)
LogisticRegression().fit(features, labels)
print(mlflow.last_active_run().info.run_id)
