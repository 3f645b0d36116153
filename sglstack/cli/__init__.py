"""The command-line face: what each invoke task runs (tasks.py only parses options and calls these)."""
