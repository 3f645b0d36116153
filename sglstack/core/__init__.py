"""The core: errors, consoles, records, signals, labels, shipped resources, safe files, quoting, credentials.
Imports nothing of ours outside core.
"""
