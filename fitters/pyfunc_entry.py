"""MLflow models-from-code entry point: logged with every model version and executed when MLflow loads it."""
import mlflow

from fitters.pyfunc import PmdbPyfunc

mlflow.models.set_model(PmdbPyfunc())
