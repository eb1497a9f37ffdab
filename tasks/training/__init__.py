"""Training runner: a mixture in, a SentenceTransformer checkpoint out, under DeepSpeed.
`worker.run` is the entry (one process, or ranks under the `deepspeed` launcher)."""
