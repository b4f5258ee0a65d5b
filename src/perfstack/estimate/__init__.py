"""Closed-form estimates of what a model needs: memory, FLOPs, latency and communication.

Pure functions from a model description (``config.ModelSpec``, parsed from a Hugging Face
``config.json`` or taken from ``catalog``) and a GPU (``hardware.Hardware``, from the spec table or
calibrated from a bench Run) to numbers that each carry their formula, inputs and assumptions.

    config.py      config.json -> ModelSpec          catalog.py   built-in architectures
    params.py      parameter counts (N, N_act)       memory.py    weights, KV, training states
    activations.py activation bytes, op by op        flops.py     FLOPs per phase
    latency.py     roofline time bounds              comms.py     DP/TP/PP volumes
    hardware.py    peaks and calibration             infer.py / train.py   the two commands' sheets
"""

from perfstack.estimate.catalog import get as catalog_model
from perfstack.estimate.config import ModelSpec, load_config, parse_config
from perfstack.estimate.params import count

__all__ = ["ModelSpec", "catalog_model", "count", "load_config", "parse_config"]
