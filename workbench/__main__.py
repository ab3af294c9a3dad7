from .cli import main

if __name__ == "__main__":  # not when a worker process imports the main module (urc fuzz --jobs)
    raise SystemExit(main())
