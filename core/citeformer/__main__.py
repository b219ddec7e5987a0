"""``python -m citeformer``: the same as the ``citeformer`` command."""

from citeformer.app.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
