"""Diff: snapshots of records, locks and images, and their pure comparison."""
