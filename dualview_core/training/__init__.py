"""Training, pure parts: the DeepSpeed config generated from TrainingConfig, a step's memory estimate,
resume rules, the mixture on disk (memory-mapped Arrow), the instruction-separation diagnostic and
the sweep grid. The runner is `tasks.training`."""
