# Put first on PYTHONPATH by ``python -m workbench.record``: every Python process the
# recorded command starts records the caches it builds (workbench/record/hook.py).
import os

if os.environ.get("URC_RECORD"):
    try:
        from workbench.record.hook import install

        install()
    except Exception as exc:  # never stop the recorded program from starting
        import sys

        print(f"workbench.record: not recording in this process ({type(exc).__name__}: {exc})", file=sys.stderr)
