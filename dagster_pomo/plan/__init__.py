"""The plan layer: what a corpus means, worked out once, for every backend to execute."""
