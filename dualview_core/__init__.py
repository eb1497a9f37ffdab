"""dualview_core: the dual-view method, pure.

Records and schemas, seed and eval-set loading with quarantine, content keys (and, as the pipeline
grows, prompts, parsing, dual views, mixtures, negatives, the loss, retrieval and metrics).
It never imports prefect, ray, mlflow, deepspeed or vllm; a test checks that in a clean interpreter.
"""
