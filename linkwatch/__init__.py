"""linkwatch shared core: record schema, sketches, config loading, CLI, and the local testbed."""
