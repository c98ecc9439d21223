"""pmdb: a performance-model database for ML training.

Importing pmdb switches MLflow telemetry off before anything can import mlflow: nothing reaches the network.
"""
import os as _os

for _var, _value in (("MLFLOW_DISABLE_TELEMETRY", "true"), ("DO_NOT_TRACK", "true"),
                     ("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                     ("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")):
    _os.environ.setdefault(_var, _value)

__version__ = "0.1.0"
