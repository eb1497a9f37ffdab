"""Storage: filesystems for local paths and s3://, contract tables written atomically through their
schema, and the one owner of the project's folder and file names."""
