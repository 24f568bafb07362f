"""Where the fitted forecasters live, and loading them back by kind."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from contract.errors import InputError
from forecasting.persistence import FORMAT_VERSION, RETRAIN_HINT, load_model

if TYPE_CHECKING:
    from forecasting.quantization_estimator import QuantizationEstimator
    from forecasting.training_estimator import TrainingEstimator

TRAINING_MODEL_FILE = "training_estimator.json"
QUANTIZATION_MODEL_FILE = "quantization_estimator.json"
DEFAULT_MODELS_DIR = Path("models")
#: Forecastable job kinds -> the model file that forecasts them.
MODEL_FILES = {"training": TRAINING_MODEL_FILE, "quantization": QUANTIZATION_MODEL_FILE}


def realtime_model_file(series: str) -> str:
    return f"realtime_{series}.json"


def load_job_estimator(models_dir: Path, kind: str) -> TrainingEstimator | QuantizationEstimator:
    """The fitted estimator for ``kind`` from ``models_dir``; a clear error when none is there."""
    from forecasting.quantization_estimator import QuantizationEstimator
    from forecasting.training_estimator import TrainingEstimator

    if kind not in MODEL_FILES:
        raise InputError("kind", f"one of {sorted(MODEL_FILES)}", kind)
    path = models_dir / MODEL_FILES[kind]
    pickled = path.with_suffix(".pkl")
    if not path.is_file() and pickled.is_file():
        raise InputError(
            "--models",
            f"a directory holding {MODEL_FILES[kind]} (models saved as data, format {FORMAT_VERSION})",
            str(models_dir),
            hint=f"It holds {pickled.name}, a pickle from an older gpuplan, which is never loaded: "
            f"{RETRAIN_HINT}",
        )
    if not path.is_file():
        raise InputError(
            "--models",
            f"a directory holding {MODEL_FILES[kind]}",
            str(models_dir),
            hint="Run `gpuplan train` first (add `--models DIR` to both commands to use another directory).",
        )
    if kind == "training":
        return load_model(path, TrainingEstimator)
    return load_model(path, QuantizationEstimator)
