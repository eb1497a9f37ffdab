"""Getting published data: downloads from the hub into the folders the core's loaders read."""
