"""Named run profiles, as data: one YAML file per profile, each a partial `PipelineConfig` (fields it
leaves out keep their defaults). `dualview_core.config.profiles` reads and resolves them; this
package holds no code, so that reading a profile imports nothing above the core.

    cpu      this machine: the bundled sample, SmolLM2 on CPU vLLM, MiniLM, SQLite MLflow in .cache/
    cluster  the paper's job on the Kubernetes cluster of infra/ (docs/cluster.md)
"""
