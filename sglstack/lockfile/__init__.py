"""The lock model: a stack's lock file parsed (`model`), its text (`text`), when it is current (`current`)."""
