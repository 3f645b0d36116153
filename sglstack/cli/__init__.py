"""The face: one module per task or part (`cli/lock.py`, `cli/deploy.py`, ...), each holding its options, a thin
task that calls its part with typed values, and what the task prints; options several tasks share are declared
once in `cmdoptions`.

Every module here uses the standard library and invoke at import (invoke loads them for every call, even
`invoke --list`); the library is imported when a task runs. Nothing imports `sglstack.cli`.
"""
