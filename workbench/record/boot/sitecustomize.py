# Put first on PYTHONPATH by ``python -m workbench.record``: every Python process the
# recorded command starts records the caches it builds (workbench/record/hook.py).
# Then the sitecustomize this one hides (a distribution's own) runs as usual.
import os
import sys

if os.environ.get("URC_RECORD"):
    try:
        try:
            import workbench  # noqa: F401
        except ImportError:  # the launcher's package, after everything the program has
            sys.path.append(os.environ.get("URC_RECORD_PACKAGE", ""))
        from workbench.record.hook import install

        install()
    except Exception as exc:  # never stop the recorded program from starting
        print(f"workbench.record: not recording in this process ({type(exc).__name__}: {exc})", file=sys.stderr)


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    kept = sys.path[:]
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401  (the next one on the path, if any)
    except ImportError:
        pass
    finally:
        sys.path[:] = kept
        if mine is not None:
            sys.modules["sitecustomize"] = mine


_chain()
