"""The face: one invoke task per function, each parsing its options and calling one library function.

Every module here uses the standard library and invoke at import (invoke loads them for every call, even
`invoke --list`); the library is imported when a task runs. Nothing imports `sglstack.cli`.
"""
